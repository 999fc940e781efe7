//! Validation as a whole: defaults, and every refused value naming its key.

use super::*;

fn parse(text: &str) -> Result<Config> {
    RawConfig::parse(text, &Origin::CommandLine)?.validate(Origin::CommandLine, None)
}

#[test]
fn unknown_key_is_an_error_naming_it() {
    let e = parse("[[frontend]]\nself_signed = true\nlisen = \"127.0.0.1:1\"\n").unwrap_err();
    assert!(e.to_string().contains("lisen"), "{e}");
}

#[test]
fn durations_and_defaults() {
    let c = parse(
        "workers = 3\n[[frontend]]\nself_signed = true\nidle_timeout = \"5m\"\nlisten = [\"127.0.0.1:0\", \"[::1]:0\"]\n",
    )
    .unwrap();
    assert_eq!(c.workers, 3);
    let f = &c.frontends[0];
    assert_eq!(f.timeouts.idle, Duration::from_secs(300));
    assert_eq!(f.timeouts.handshake, defaults::HANDSHAKE_TIMEOUT);
    assert_eq!(f.listen.addrs.len(), 2);
    assert!(f.listen.addrs[1].is_ipv6());
    assert!(matches!(f.backend.target, Backend::Demo));
    assert_eq!(*f.tls.alpn, vec![b"http/1.1".to_vec()]);
}

#[test]
fn bad_values_name_their_key() {
    for (text, key) in [
        (
            "[[frontend]]\nself_signed = true\nidle_timeout = \"soon\"\n",
            "idle_timeout",
        ),
        (
            "[[frontend]]\nself_signed = true\nlisten = \"localhost\"\n",
            "listen",
        ),
        (
            "[[frontend]]\nself_signed = true\nciphersuites = [\"RC4\"]\n",
            "ciphersuites",
        ),
        (
            "[[frontend]]\nself_signed = true\ngroups = [\"ffdhe1024\"]\n",
            "groups",
        ),
        (
            "[[frontend]]\nself_signed = true\nprotocols = [\"SSLv3\"]\n",
            "protocols",
        ),
        ("[[frontend]]\nlisten = \"127.0.0.1:1\"\n", "certificates"),
        (
            "[[frontend]]\nself_signed = true\nbackend = \"nohost\"\n",
            "backend",
        ),
        (
            "[[frontend]]\nself_signed = true\nproxy_protocol = \"v2\"\n",
            "proxy_protocol",
        ),
        (
            "[[frontend]]\nself_signed = true\nproxy_protocol = \"v3\"\n",
            "proxy_protocol",
        ),
        (
            "log_level = \"loud\"\n[[frontend]]\nself_signed = true\n",
            "log_level",
        ),
        (
            "[[frontend]]\nself_signed = true\nktls = true\nrecord_layer = \"rustls\"\n",
            "ktls",
        ),
        (
            "[[frontend]]\nself_signed = true\nrecord_layer = \"openssl\"\n",
            "record_layer",
        ),
        (
            "reload_timeout = \"0s\"\n[[frontend]]\nself_signed = true\n",
            "reload_timeout",
        ),
        (
            "log_queue_lines = 1\n[[frontend]]\nself_signed = true\n",
            "log_queue_lines",
        ),
        (
            "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v1\"\nproxy_protocol_tlvs = [\"alpn\"]\n",
            "proxy_protocol_tlvs",
        ),
        (
            "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"sni\"]\n",
            "proxy_protocol_tlvs",
        ),
        (
            "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"client_cert\"]\n",
            "proxy_protocol_tlvs",
        ),
        (
            "[[frontend]]\nself_signed = true\nproxy_client_cert_tlv = 0x20\n",
            "proxy_client_cert_tlv",
        ),
        (
            "[[frontend]]\nself_signed = true\naccept_proxy_from = [\"10.0.0.0/8\"]\n",
            "accept_proxy_from",
        ),
        (
            "[[frontend]]\nself_signed = true\naccept_proxy = true\naccept_proxy_from = [\"10.0.0.0/33\"]\n",
            "accept_proxy_from",
        ),
        (
            "[[frontend]]\nself_signed = true\naccept_proxy = true\nproxy_header_timeout = \"0s\"\n",
            "proxy_header_timeout",
        ),
        (
            "[[frontend]]\nself_signed = true\naccept_proxy = true\naccept_proxy_from = []\n",
            "accept_proxy_from",
        ),
        (
            "[[frontend]]\nself_signed = true\nclient_auth = \"required\"\n",
            "client_ca",
        ),
        (
            "[[frontend]]\nself_signed = true\nclient_ca = \"ca.pem\"\n",
            "client_ca",
        ),
        (
            "[[frontend]]\nself_signed = true\nclient_auth = \"optional_no_ca\"\nclient_crl = \"ca.crl\"\n",
            "client_crl",
        ),
        (
            "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nproxy_protocol = \"v2\"\n\
             proxy_protocol_tlvs = [\"client_cert\"]\nclient_auth = \"optional_no_ca\"\n",
            "client_auth",
        ),
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
    // optional_no_ca may go without a CA: every certificate is then passed on as unverified.
    let fe = &parse(
        "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nclient_auth = \"optional_no_ca\"\n\
         proxy_protocol = \"v2\"\nproxy_protocol_tlvs = [\"ssl\"]\n",
    )
    .expect("optional_no_ca without client_ca")
    .frontends[0];
    assert_eq!(fe.client_auth.mode, ClientAuth::OptionalNoCa);
    assert_eq!(fe.client_auth.ca, None);
    assert!(parse("workers = 1\n")
        .unwrap_err()
        .to_string()
        .contains("frontend"));
}

#[test]
fn backend_policy_defaults_to_round_robin_and_needs_a_backend() {
    let one = "[[frontend]]\nself_signed = true\nbackend = [\"127.0.0.1:1\", \"127.0.0.1:2\"]\n";
    let fe = &parse(one).unwrap().frontends[0];
    assert_eq!(fe.backend.policy, BackendPolicy::RoundRobin);
    for (text, want) in [
        (
            "backend_policy = \"round_robin\"\n",
            BackendPolicy::RoundRobin,
        ),
        (
            "backend_policy = \"least_connections\"\n",
            BackendPolicy::LeastConnections,
        ),
    ] {
        let fe = &parse(&format!("{one}{text}")).unwrap().frontends[0];
        assert_eq!(fe.backend.policy, want, "{text}");
    }
    for text in [
        "[[frontend]]\nself_signed = true\nbackend_policy = \"least_connections\"\n",
        "[[frontend]]\nself_signed = true\nbackend = []\nbackend_policy = \"round_robin\"\n",
    ] {
        let e = parse(text).unwrap_err().to_string();
        assert!(
            e.contains("frontend \"frontend0\": backend_policy: needs a backend"),
            "{text}: {e}"
        );
    }
    let e = parse(&format!("{one}backend_policy = \"random\"\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("backend_policy") && e.contains("least_connections"),
        "{e}"
    );
    assert_eq!(
        BackendPolicy::LeastConnections.to_string(),
        "least_connections"
    );
    assert_eq!(BackendPolicy::RoundRobin.to_string(), "round_robin");
}

#[test]
fn tls13_only_suites_with_tls12_enabled_is_rejected() {
    let e =
        parse("[[frontend]]\nself_signed = true\nciphersuites = [\"TLS13_AES_128_GCM_SHA256\"]\n")
            .unwrap_err()
            .to_string();
    assert!(e.contains("TLS1.2"), "{e}");
}

#[test]
fn h2_in_front_of_the_demo_page_is_refused() {
    let refused = parse("[[frontend]]\nself_signed = true\nalpn = [\"h2\", \"http/1.1\"]\n")
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains("alpn") && refused.contains("demo"),
        "{refused}"
    );
    let with_backend =
        "[[frontend]]\nself_signed = true\nbackend = \"127.0.0.1:1\"\nalpn = [\"h2\"]\n";
    assert!(parse(with_backend).is_ok());
}

#[test]
fn a_frontend_name_that_would_break_a_metric_label_is_refused() {
    for bad in ["we\"b", "a\\b", "line\nbreak", ""] {
        let text = format!(
            "[[frontend]]\nname = {}\nself_signed = true\n",
            toml::Value::String(bad.into())
        );
        let err = RawConfig::parse(&text, &Origin::CommandLine)
            .and_then(|r| r.validate(Origin::CommandLine, None))
            .expect_err(bad)
            .to_string();
        assert!(err.contains("frontend[0].name"), "{err}");
    }
}

#[test]
fn a_list_of_two_certificates_is_two_bundles_and_a_table_is_a_pair() {
    let raw = RawConfig::parse(
        "[[frontend]]\ncertificates = [\"a.pem\", \"b.pem\", { cert = \"c.crt\", key = \"c.key\" }]\n",
        &Origin::CommandLine,
    )
    .expect("parses");
    let entries = raw.frontends[0]
        .certificates
        .clone()
        .map(OneOrMany::into_vec)
        .unwrap_or_default();
    let shown: Vec<String> = entries
        .iter()
        .map(|e| match e {
            CertEntry::Path(p) => p.display().to_string(),
            CertEntry::Pair(p) => format!("{} + {}", p.cert.display(), p.key.display()),
        })
        .collect();
    assert_eq!(shown, ["a.pem", "b.pem", "c.crt + c.key"]);
    for bad in [
        "{ cert = \"c.crt\" }",
        "{ cert = \"c.crt\", key = \"k\", keyy = \"x\" }",
    ] {
        let text = format!("[[frontend]]\ncertificates = [{bad}]\n");
        assert!(
            RawConfig::parse(&text, &Origin::CommandLine).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn a_routes_tls_policy_needs_sni_and_inherits_what_it_does_not_set() {
    let route = |keys: &str| {
        format!(
            "[[frontend]]\nself_signed = true\nprotocols = [\"TLS1.3\"]\nbackend = \"127.0.0.1:1\"\n\
             [[frontend.route]]\nname = \"r\"\nbackend = \"127.0.0.1:2\"\n{keys}\n"
        )
    };
    let e = parse(&route("alpn = [\"h2\"]\nprotocols = [\"TLS1.2\"]")).unwrap_err();
    assert!(e.to_string().contains("route[0].sni"), "{e}");
    let e = parse(&route("sni = [\"a.test\"]\nclient_auth = \"required\"")).unwrap_err();
    assert!(e.to_string().contains("route[0].client_ca"), "{e}");
    let c = parse(&route(
        "sni = [\"a.test\"]\nciphersuites = [\"TLS_AES_256_GCM_SHA384\"]",
    ))
    .unwrap();
    let r = &c.frontends[0].route.0[0];
    let p = r.policy.as_ref().expect("a policy");
    // The frontend's protocols, the route's suites.
    assert_eq!(p.tls.versions, c.frontends[0].tls.versions);
    assert_eq!(p.tls.ciphersuites.len(), 1);
    assert!(r.policy_for(Some("A.TEST")).is_some());
    assert!(r.policy_for(Some("b.test")).is_none() && r.policy_for(None).is_none());
    let plain = parse(&route("sni = [\"a.test\"]")).unwrap();
    assert!(plain.frontends[0].route.0[0].policy.is_none());
}
