//! shuck's TLS 1.3 record layer against rustls' on the same bytes: see
//! `shuck_proxy::fuzzing::check` and docs/fuzzing.md ("The record layer").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    shuck_proxy::fuzzing::check(data);
});
