//! No hidden state: what the parts of a running server share lives in its `worker::Engine`,
//! made by the server and handed to whoever needs it, never in a process-wide `static`. Outside
//! `sys/` (the operating system's own process-wide facts), every `static` of the engine that is
//! not a plain reference is one of the exceptions below, each with its reason. A new one needs
//! a reason here too.

mod source;

/// (file under src/, static's name, why it may be process-wide or per thread).
const EXCEPTIONS: &[(&str, &str, &str)] = &[
    ("obs/logging.rs", "LINES_DROPPED", "the log writer is the process's (tracing's global subscriber), and its count of dropped lines with it"),
    ("obs/logging.rs", "LIBRARY_BUDGET", "thread-local: each thread's budget for libraries' log lines"),
    ("obs/logging.rs", "PANIC_BUDGET", "thread-local: each thread's budget for panic lines"),
    ("obs/log_limit.rs", "BUDGET", "thread-local: each worker's budget for per-connection lines"),
    ("mem/buf_pool.rs", "POOL", "thread-local: each worker's copy buffers"),
    ("mem/buf_pool.rs", "RECORD_POOL", "thread-local: each worker's record buffers"),
    ("mem/buf_pool.rs", "BATCH_POOL", "thread-local: each worker's batch buffers"),
    ("tls/stream/ktls.rs", "CMSG", "thread-local: each worker's control-message buffer"),
    ("tls/stream/ktls.rs", "KERNEL_LACKS_TLS", "a fact about this kernel, learnt once"),
    ("tls/stream/ktls.rs", "ULP_REFUSED", "a warning logged once per process (a client can cause it)"),
    ("tls/stream/ktls.rs", "KEYS_REFUSED", "a warning logged once per process (a client can cause it)"),
    ("tls/stream/ktls.rs", "REKEY_REFUSED", "a warning logged once per process (a client can cause it)"),
    ("metrics/mod.rs", "BUILD", "written once by the binary at start: what it knows of its own build"),
    ("conn/backend_header.rs", "PREFIX", "written once: the process's random prefix of PROXY unique IDs"),
    ("store/transport.rs", "CONFIG", "written once: the system's CA roots, read at the first rediss:// connection"),
    ("tls/certs.rs", "MADE", "the self-signed certificate: one per process, kept across reloads"),
    ("tls/pkcs11/token.rs", "MODULES", "PKCS#11 allows one C_Initialize per module per process: the loaded modules are the process's"),
    ("tls/pkcs11/signer.rs", "IN_MODULE", "the signer threads inside a token's module, for the process's exit (a module's teardown is the process's)"),
    ("tls/pkcs11/signer.rs", "EXITING", "the process is exiting: no signer thread enters a token's module again"),
    ("tls/pkcs11/signer.rs", "ALL", "each token key's signature counts, across the pools reloads make for the same key, read by /metrics"),
    ("tls/stream/records/differential/pair.rs", "FIXED", "test and fuzzing builds only: a fixed random source"),
    ("tls/stream/records/differential/pair.rs", "FIXED_X25519", "test and fuzzing builds only: a fixed key share"),
    ("tls/stream/records/differential/pair.rs", "MADE", "test and fuzzing builds only: one certificate for all pairs"),
];

/// The `static` items of `code` (before an inline `mod tests`) whose type is not a reference:
/// their names.
fn statics(code: &str) -> Vec<String> {
    let code = source::without_tests(code);
    code.lines()
        .filter_map(|line| {
            let rest = line.trim_start();
            // Any visibility: `pub`, `pub(crate)`, `pub(super)`, `pub(in …)`.
            let rest = match rest.strip_prefix("pub") {
                Some(r) if r.starts_with('(') => r.split_once(") ")?.1,
                Some(r) => r.trim_start(),
                None => rest,
            };
            let rest = rest.strip_prefix("static ")?;
            let rest = rest.strip_prefix("mut ").unwrap_or(rest);
            let (name, ty) = rest.split_once(':')?;
            let plain_reference = ty.trim_start().starts_with('&');
            (!plain_reference && !name.contains(' ')).then(|| name.trim().to_string())
        })
        .collect()
}

#[test]
fn every_static_outside_sys_is_a_documented_exception() {
    let src = source::src();
    let mut found = Vec::new();
    for file in source::files() {
        let rel = file.strip_prefix(&src).expect("under src");
        let rel = rel.to_string_lossy().to_string();
        if rel.starts_with("sys/") || rel.ends_with("tests.rs") {
            continue;
        }
        let code = std::fs::read_to_string(&file).expect("read");
        for name in statics(&code) {
            found.push((rel.clone(), name));
        }
    }
    assert!(found.len() >= 10, "the source was read: {found:?}");
    for (file, name) in &found {
        assert!(
            EXCEPTIONS.iter().any(|(f, n, _)| f == file && n == name),
            "static {name} in {file}: shared state belongs in worker::Engine (or, if it must be \
             process-wide or per thread, an exception in tests/statics.rs with its reason)"
        );
    }
    // And no exception outlives its static.
    for (file, name, _) in EXCEPTIONS {
        assert!(
            found.iter().any(|(f, n)| f == file && n == name),
            "the exception for {name} in {file} names no static any more"
        );
    }
}

#[test]
fn the_reader_sees_statics_in_all_their_forms() {
    let code = "static A: AtomicBool = AtomicBool::new(false);\n    static B: RefCell<u8> = 0;\n\
                pub(crate) static C: LazyLock<X> = LazyLock::new(X::default);\n\
                pub static D: &str = \"d\";\nstatic E: &[u8] = b\"\";\nlet s = \"static F: u8\";\n\
                pub(super) static H: Cell<u8> = 0;\nstatic mut I: u8 = 0;\n\
                #[cfg(test)]\nmod tests {\n    static G: Mutex<u8> = Mutex::new(0);\n}";
    assert_eq!(statics(code), ["A", "B", "C", "H", "I"]);
}
