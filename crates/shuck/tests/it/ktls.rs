//! kTLS where the kernel has it. This machine's kernel has no `tls` module, so the test boots
//! Debian's kernel (which has it) in qemu, with an initramfs holding busybox, the kernel's tls and
//! AEAD modules, this build's `shuck`, and curl and openssl with their libraries. The guest
//! (`ktls_vm/init.sh`) serves through shuck with `ktls = true` in front of busybox's httpd and
//! checks what it gets: downloads, uploads and requests that arrive after the hand-over with each
//! cipher the kernel takes, the counter saying every connection went to the kernel, and a client's
//! KeyUpdate (which Debian 12's 6.1 cannot rekey: the connection must end, named in the log, and
//! shuck must go on serving). `.ci/run` puts the kernel and modules in `target/ktls-vm`
//! (`SHUCK_KTLS_VM` overrides); qemu runs without KVM (this VM's /dev/kvm does not run guests).
//!
//! Where the kernel lacks kTLS, the same configuration must fall back to shuck's own records:
//! `ktls_falls_back_where_the_kernel_has_no_tls` runs on this machine's own kernel.

use std::fs::Permissions;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use shuck_test_support::clients::{curl, sum, wait_metric};
use shuck_test_support::pki::{toml_path, Key, Pki};
use shuck_test_support::process::{run_bounded, HttpBackend, Shuck, SHUCK};

/// Where `.ci/run` left the guest's kernel (`vmlinuz`) and modules (`modules/NN-name.ko`).
fn vm_dir() -> PathBuf {
    std::env::var_os("SHUCK_KTLS_VM").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/ktls-vm"),
        PathBuf::from,
    )
}

#[test]
fn ktls_carries_connections_in_a_kernel_that_has_it() {
    let vm = vm_dir();
    assert!(
        vm.join("vmlinuz").is_file() && vm.join("modules").is_dir(),
        "no guest kernel in {}: .ci/run downloads Debian's kernel package there",
        vm.display()
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("root");
    build_root(&root, &vm);
    // shuck's certificate and the CA the guest's own client checks it with.
    let pki = Pki::new();
    copy(
        &pki.leaf("vm.pem", "vm", &["vm.test"], Key::EcdsaP256),
        &root.join("cert.pem"),
    );
    copy(&pki.ca_path(), &root.join("ca.pem"));
    let initrd = dir.path().join("initrd.cpio");
    pack(&root, &initrd);
    let out = run_bounded(
        Command::new("qemu-system-x86_64")
            .args(["-accel", "tcg", "-m", "2048", "-smp", "2"])
            .args(["-nographic", "-no-reboot", "-kernel"])
            .arg(vm.join("vmlinuz"))
            .arg("-initrd")
            .arg(&initrd)
            .args(["-append", "console=ttyS0 quiet panic=-1"]),
        b"",
        600,
    );
    let console = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let report: Vec<&str> = console
        .lines()
        .filter(|l| l.contains("KTLS-VM") || l.starts_with("shuck: "))
        .collect();
    let report = report.join("\n");
    for check in [
        "KTLS-VM ok: 2 MiB download, AES-256-GCM",
        "KTLS-VM ok: 2 MiB upload, AES-128-GCM",
        "KTLS-VM ok: 2 MiB download, slow reader",
        "KTLS-VM ok: 2 MiB download, slow reader that half-closed first",
        "KTLS-VM ok: late request, AES-128-GCM",
        "KTLS-VM ok: FIN after close_notify",
        "KTLS-VM ok: late request, ChaCha20, close_notify",
        "KTLS-VM ok: 9 connections in the kernel, none in user space",
        "KTLS-VM ok: 20 MiB download, AES-128-GCM, past the bound on records",
        "KTLS-VM ok: still serving",
        "KTLS-VM PASS",
    ] {
        assert!(
            report.lines().any(|l| l.ends_with(check)),
            "guest did not report {check:?}:\n{report}\n--- console ---\n{console}"
        );
    }
    assert!(!report.contains("KTLS-VM FAIL"), "{report}");
}

/// The guest's files: busybox as init's shell, the modules, shuck (without its debug sections,
/// a sixth of the size), curl and openssl, and every library `ldd` names for them.
fn build_root(root: &Path, vm: &Path) {
    for d in ["bin", "usr/bin", "modules", "proc", "sys", "dev", "tmp"] {
        std::fs::create_dir_all(root.join(d)).expect("mkdir");
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ktls_vm");
    copy(&here.join("init.sh"), &root.join("init"));
    std::fs::set_permissions(root.join("init"), Permissions::from_mode(0o755)).expect("chmod");
    copy(&here.join("ktls.toml"), &root.join("ktls.toml"));
    copy(Path::new("/bin/busybox"), &root.join("bin/busybox"));
    for m in std::fs::read_dir(vm.join("modules")).expect("modules") {
        let m = m.expect("module").path();
        copy(&m, &root.join("modules").join(m.file_name().expect("name")));
    }
    strip_into(Path::new(&*SHUCK), &root.join("shuck"));
    let tools = [Path::new("/usr/bin/curl"), Path::new("/usr/bin/openssl")];
    for t in tools {
        copy(t, &root.join(t.strip_prefix("/").expect("absolute")));
    }
    // This test binary, whose ignored test `guest_client_half_closes_and_reads_slowly` is a
    // client no command-line tool can be.
    let me = std::env::current_exe().expect("test binary");
    strip_into(&me, &root.join("ktls-client"));
    for bin in [Path::new(&*SHUCK), &me].into_iter().chain(tools) {
        for lib in libraries(bin) {
            let to = root.join(lib.strip_prefix("/").expect("absolute"));
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            copy(&lib, &to);
        }
    }
}

/// `bin` without its debug sections, at `to`.
fn strip_into(bin: &Path, to: &Path) {
    let out = run_bounded(
        Command::new("strip")
            .arg("--strip-debug")
            .arg("-o")
            .arg(to)
            .arg(bin),
        b"",
        120,
    );
    assert!(out.status.success(), "strip {}: {out:?}", bin.display());
}

/// The shared libraries `ldd` says `bin` loads, the dynamic loader included.
fn libraries(bin: &Path) -> Vec<PathBuf> {
    let out = run_bounded(Command::new("ldd").arg(bin), b"", 30);
    assert!(out.status.success(), "ldd {}: {out:?}", bin.display());
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .collect()
}

fn copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("copy {} to {}: {e}", from.display(), to.display()));
}

/// An uncompressed newc cpio archive of `root`, as the kernel unpacks an initramfs.
fn pack(root: &Path, to: &Path) {
    let out = run_bounded(
        Command::new("sh")
            .arg("-c")
            .arg("find . | cpio -o -H newc --quiet > \"$1\"")
            .arg("sh")
            .arg(to)
            .current_dir(root),
        b"",
        120,
    );
    assert!(out.status.success(), "cpio: {out:?}");
}

#[test]
fn ktls_falls_back_where_the_kernel_has_no_tls() {
    let ulps = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
    let kernel_has_tls = ulps.split_whitespace().any(|u| u == "tls");
    let pki = Pki::new();
    let cert = pki.leaf("k.pem", "k", &["k.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    let shuck = Shuck::start(&format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"k\"\nlisten = \"127.0.0.1:0\"\n\
         backend = \"{}\"\ncertificates = {}\nktls = true\n",
        b.addr,
        toml_path(&cert)
    ));
    let check = run_bounded(
        Command::new(&*SHUCK)
            .arg("check")
            .arg("--config")
            .arg(shuck.config_path()),
        b"",
        30,
    );
    let said = String::from_utf8_lossy(&check.stdout);
    let expected = if kernel_has_tls {
        "this kernel lists the tls module"
    } else {
        "this kernel does not list the tls module"
    };
    assert!(
        said.lines()
            .any(|l| l.starts_with("  ktls: ") && l.contains(expected)),
        "shuck check: {said}"
    );
    for i in 0..3 {
        let out = curl(&pki, &shuck, "k.test", &format!("/{i}"), &[]);
        assert!(out.status.success(), "{out:?}");
        let body = String::from_utf8_lossy(&out.stdout);
        assert_eq!(body, format!("backend got: GET /{i} HTTP/1.1"));
    }
    // TLS 1.2 stays with rustls: counted in user space wherever it runs.
    let out = curl(&pki, &shuck, "k.test", "/tls12", &["--tls-max", "1.2"]);
    assert!(out.status.success(), "{out:?}");
    // Counted as each connection's task ends, a little after curl has its answer.
    let text = wait_metric(shuck.addrs[1], "shuck_ktls_connections_total", &[], 4);
    let count = |records: &str| {
        sum(
            &text,
            "shuck_ktls_connections_total",
            &[&format!("records=\"{records}\"")],
        )
    };
    if kernel_has_tls {
        assert_eq!((count("kernel"), count("user_space")), (3, 1), "{text}");
    } else {
        assert_eq!((count("kernel"), count("user_space")), (0, 4), "{text}");
        let log = shuck.log_text();
        assert_eq!(
            log.matches("this kernel has no TLS upper-layer protocol")
                .count(),
            1,
            "one warning for the process, not one per connection: {log}"
        );
    }
}

/// A reload that switches `ktls` on applies to the next connection (it was kept as started
/// while `running.toml` and the log said otherwise). Kernel or not, a connection of a frontend
/// with `ktls = true` is counted in `shuck_ktls_connections_total`; one without is not.
#[test]
fn a_reload_that_turns_ktls_on_applies_to_new_connections() {
    let pki = Pki::new();
    let cert = pki.leaf("k.pem", "k", &["k.test"], Key::EcdsaP256);
    let b = HttpBackend::start();
    let base = format!(
        "metrics_listen = \"127.0.0.1:0\"\n[[frontend]]\nname = \"k\"\nlisten = \"127.0.0.1:0\"\n\
         backend = \"{}\"\ncertificates = {}\n",
        b.addr,
        toml_path(&cert)
    );
    let shuck = Shuck::start(&format!("{base}ktls = false\n"));
    let out = curl(&pki, &shuck, "k.test", "/before", &[]);
    assert!(out.status.success(), "{out:?}");
    std::fs::write(shuck.config_path(), format!("{base}ktls = true\n")).expect("config");
    shuck.signal("HUP");
    shuck.wait_log("reloaded certificates and configuration");
    let out = curl(&pki, &shuck, "k.test", "/after", &[]);
    assert!(out.status.success(), "{out:?}");
    // Counted as the connection's task ends, a little after curl has its answer.
    let text = wait_metric(shuck.addrs[1], "shuck_ktls_connections_total", &[], 1);
    assert_eq!(
        sum(&text, "shuck_ktls_connections_total", &[]),
        1,
        "only the connection after the reload: {text}"
    );
}

/// A rustls client in the guest, connected to shuck, trusting the CA at `SHUCK_GUEST_CA`, with
/// `rcvbuf` bytes of receive buffer.
fn guest_connect(rcvbuf: usize) -> (rustls::ClientConnection, std::net::TcpStream) {
    let ca = std::env::var("SHUCK_GUEST_CA").expect("SHUCK_GUEST_CA");
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(ca).expect("ca");
    for c in rustls::pki_types::pem::PemObject::pem_slice_iter(&pem) {
        roots.add(c.expect("pem")).expect("root");
    }
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("vm.test").expect("name");
    let conn = rustls::ClientConnection::new(std::sync::Arc::new(config), name).expect("conn");
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket.set_recv_buffer_size(rcvbuf).expect("SO_RCVBUF");
    let addr: std::net::SocketAddr = "127.0.0.1:8443".parse().expect("addr");
    socket.connect(&addr.into()).expect("connect");
    let tcp = std::net::TcpStream::from(socket);
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    (conn, tcp)
}

/// Run in the guest only (`ktls_vm/init.sh`): a client that asks for the small page, reads the
/// answer up to shuck's close_notify and then, its own side still open, waits for TCP's FIN,
/// as a client that takes the end of TCP for the end of the answer would.
#[test]
#[ignore = "the kTLS guest's client: tests/ktls_vm/init.sh runs it in qemu"]
fn guest_client_gets_the_fin_after_close_notify() {
    use std::io::{Read, Write};
    let (mut conn, mut tcp) = guest_connect(64 * 1024);
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    // After the handshake and a pause, so that the request reaches the kernel's records (the
    // guest's shuck shows no sign of having handed its keys over).
    tls.flush().expect("handshake");
    std::thread::sleep(std::time::Duration::from_secs(1));
    tls.write_all(b"GET /small HTTP/1.0\r\n\r\n")
        .expect("request");
    let mut answer = Vec::new();
    tls.read_to_end(&mut answer)
        .expect("the answer, to close_notify");
    assert!(
        String::from_utf8_lossy(&answer).ends_with("small answer\n"),
        "{answer:?}"
    );
    let mut byte = [0u8; 1];
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    match tcp.read(&mut byte) {
        Ok(0) => {}
        other => panic!("no FIN within 10 s of close_notify: {other:?}"),
    }
}

/// Run in the guest only (`ktls_vm/init.sh`): a client that reads a 2 MiB answer slowly through
/// a small receive buffer, so that shuck's socket stays full while the backend ends, and a
/// quarter of the way in sends its close_notify and TCP's FIN (it will send nothing more).
/// Everything must arrive, up to shuck's close_notify.
#[test]
#[ignore = "the kTLS guest's client: tests/ktls_vm/init.sh runs it in qemu"]
fn guest_client_half_closes_and_reads_slowly() {
    use sha2::{Digest, Sha256};
    use std::io::{Read, Write};
    let want = std::env::var("SHUCK_GUEST_SHA256").expect("SHUCK_GUEST_SHA256");
    let (mut conn, mut tcp) = guest_connect(4096);
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    tls.write_all(b"GET /big HTTP/1.0\r\n\r\n")
        .expect("request");
    tls.flush().expect("flush");
    // The close_notify and FIN go once a quarter of the answer is in: by then shuck has handed
    // the records to the kernel (the counter checks it), so they are the kernel's to read, and
    // most of the answer is still to come.
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    let mut half_closed = false;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "answer not over in 120 s"
        );
        if !half_closed && answer.len() > 512 * 1024 {
            conn.send_close_notify();
            while conn.wants_write() {
                conn.write_tls(&mut tcp).expect("close_notify");
            }
            tcp.shutdown(std::net::Shutdown::Write).expect("FIN");
            half_closed = true;
        }
        match rustls::Stream::new(&mut conn, &mut tcp).read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&chunk[..n]),
            Err(e) => panic!("after {} bytes: {e}", answer.len()),
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert!(half_closed, "the answer ended after {} bytes", answer.len());
    let body_at = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header")
        + 4;
    let got = Sha256::digest(&answer[body_at..]);
    let got = got.iter().fold(String::new(), |mut s, b| {
        use std::fmt::Write as _;
        let _ = write!(s, "{b:02x}");
        s
    });
    assert_eq!(got, want, "{} body bytes", answer.len() - body_at);
}
