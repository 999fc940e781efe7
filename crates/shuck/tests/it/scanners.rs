//! The scanners operators point at a TLS endpoint, run against shuck as they would be: sslyze's
//! Mozilla "intermediate" compliance check for an RSA, an ECDSA and a dual-certificate frontend,
//! and testssl.sh's vulnerability checks. Certificates are made with the openssl CLI the way a
//! public CA issues them (a CA with keyUsage, 90-day leaves), since the scanners judge the
//! certificate too. sslyze comes from PyPI and testssl.sh from Debian (`.ci/run` installs both);
//! the tests fail, not skip, without them.

use std::path::{Path, PathBuf};
use std::process::Command;

use shuck_test_support::process::{run_bounded, HttpBackend, Shuck};

/// Runs the openssl CLI, which must succeed.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
}

/// A CA as scanners expect one (basicConstraints and keyUsage, both critical), and leaves for
/// localhost: `rsa.pem` and `ecdsa.pem` bundles (chain, then key). Returns the CA's path.
fn public_style_pki(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("ca.cnf"),
        "[req]\ndistinguished_name=dn\n[dn]\n[ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\nsubjectKeyIdentifier=hash\n",
    )
    .expect("write");
    std::fs::write(
        dir.join("leaf.cnf"),
        "subjectAltName=DNS:localhost\nbasicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nauthorityKeyIdentifier=keyid\n",
    )
    .expect("write");
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "365",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-subj",
            "/CN=scanner test CA",
            "-config",
            "ca.cnf",
            "-extensions",
            "ca",
        ],
    );
    for (name, key) in [
        ("rsa", &["-newkey", "rsa:2048"][..]),
        (
            "ecdsa",
            &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"][..],
        ),
    ] {
        let mut args = vec!["req", "-nodes", "-subj", "/CN=localhost", "-keyout"];
        let keyfile = format!("{name}.key");
        let csr = format!("{name}.csr");
        args.extend([keyfile.as_str(), "-out", csr.as_str()]);
        args.extend(key);
        openssl(dir, &args);
        let crt = format!("{name}.crt");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "90",
                "-out",
                &crt,
                "-extfile",
                "leaf.cnf",
            ],
        );
        let bundle: Vec<u8> = [crt.as_str(), "ca.pem", keyfile.as_str()]
            .iter()
            .flat_map(|f| std::fs::read(dir.join(f)).expect("read"))
            .collect();
        std::fs::write(dir.join(format!("{name}.pem")), bundle).expect("write bundle");
    }
    dir.join("ca.pem")
}

/// shuck with three frontends, in this order: RSA, ECDSA, both (dual).
fn three_frontends(dir: &Path, backend: &HttpBackend) -> Shuck {
    let cert = |n: &str| format!("{:?}", dir.join(n).to_str().expect("utf-8"));
    let config = format!(
        "[[frontend]]\nname = \"rsa\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{b}\"\ncertificates = [{r}]\n\
         [[frontend]]\nname = \"ecdsa\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{b}\"\ncertificates = [{e}]\n\
         [[frontend]]\nname = \"dual\"\nlisten = \"127.0.0.1:0\"\nbackend = \"{b}\"\ncertificates = [{e}, {r}]\n",
        b = backend.addr,
        r = cert("rsa.pem"),
        e = cert("ecdsa.pem"),
    );
    Shuck::start(&config)
}

/// The tool: `$VAR` if set, else the name on PATH; a clear failure when missing.
fn tool(var: &str, name: &str, install: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        return PathBuf::from(p);
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found (set {var} or put it on PATH): {install}"))
}

#[test]
fn sslyze_finds_rsa_ecdsa_and_dual_frontends_compliant_with_mozilla_intermediate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = public_style_pki(dir.path());
    let backend = HttpBackend::start();
    let shuck = three_frontends(dir.path(), &backend);
    let sslyze = tool("SSLYZE", "sslyze", "pip install sslyze (.ci/run does)");
    let targets: Vec<String> = shuck.addrs[..3]
        .iter()
        .map(|a| format!("localhost:{}{{127.0.0.1}}", a.port()))
        .collect();
    let mut cmd = Command::new(sslyze);
    cmd.arg("--mozilla_config=intermediate")
        .arg("--certinfo_ca_file")
        .arg(&ca)
        .args(&targets);
    let out = run_bounded(&mut cmd, b"", 300);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "not compliant: {text}");
    assert_eq!(text.matches("OK - Compliant.").count(), 3, "{text}");
    let _ = shuck.stop();
}

/// What testssl.sh found, from its JSON: (id, severity, finding).
fn testssl_findings(json: &Path) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(json).expect("testssl JSON");
    let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    v.as_array()
        .expect("a list of findings")
        .iter()
        .map(|f| {
            let s = |k: &str| f[k].as_str().unwrap_or_default().to_string();
            (s("id"), s("severity"), s("finding"))
        })
        .collect()
}

/// testssl.sh's vulnerability checks (-U) and cipher list per protocol (-E) on the dual
/// frontend: nothing above INFO, and exactly the suites of Mozilla's intermediate profile that
/// shuck offers by default (ECDHE with AES-GCM or ChaCha20, for ECDSA and RSA; the three TLS 1.3
/// suites).
#[test]
fn testssl_finds_no_vulnerability_and_the_expected_suites() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = public_style_pki(dir.path());
    let backend = HttpBackend::start();
    let shuck = three_frontends(dir.path(), &backend);
    let testssl = tool(
        "TESTSSL",
        "testssl",
        "apt-get install testssl.sh (.ci/run does)",
    );
    let json = dir.path().join("testssl.json");
    let mut cmd = Command::new(testssl);
    cmd.args([
        "--quiet",
        "--color",
        "0",
        "--warnings",
        "off",
        "-U",
        "-E",
        "--add-ca",
    ])
    .arg(&ca)
    .arg("--jsonfile")
    .arg(&json)
    .arg(shuck.addrs[2].to_string());
    let out = run_bounded(&mut cmd, b"", 300);
    let text = String::from_utf8_lossy(&out.stdout);
    let findings = testssl_findings(&json);
    assert!(findings.len() > 20, "testssl ran its checks: {text}");
    let bad: Vec<_> = findings
        .iter()
        .filter(|(_, sev, _)| !matches!(sev.as_str(), "OK" | "INFO"))
        .collect();
    assert!(bad.is_empty(), "findings above INFO: {bad:#?}\n{text}");
    let mut suites: Vec<&str> = findings
        .iter()
        .filter_map(|(id, _, _)| id.strip_prefix("cipher-"))
        .collect();
    suites.sort_unstable();
    let mut want = vec![
        "tls1_2_xc02b",
        "tls1_2_xc02c",
        "tls1_2_xcca9", // ECDHE-ECDSA: AES-128/256-GCM, ChaCha20
        "tls1_2_xc02f",
        "tls1_2_xc030",
        "tls1_2_xcca8", // ECDHE-RSA: the same
        "tls1_3_x1301",
        "tls1_3_x1302",
        "tls1_3_x1303",
    ];
    want.sort_unstable();
    assert_eq!(suites, want, "{text}");
    let _ = shuck.stop();
}
