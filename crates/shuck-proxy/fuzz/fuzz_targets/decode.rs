//! Arbitrary bytes into the PROXY protocol decoder, as if they were the first bytes of a
//! connection. Besides "never panics", checks the contracts the reader in proxy_in relies on:
//!
//! - a complete header lies within the input, within the spec's size limits (107 bytes for a v1
//!   line, `V2_MAX_RECEIVED` for v2), and decodes the same from exactly its own bytes;
//! - every strict prefix of a complete header is `Incomplete` (the reader waits, never refuses
//!   a header that is still arriving);
//! - `Incomplete { total: Some(t) }` announces more bytes than are there, within the limit;
//! - the TLVs of an accepted header iterate without error, and so does every SSL TLV and its
//!   sub-TLVs (the decoder validated them, and callers `unwrap`-free iterate them later).

#![no_main]

use libfuzzer_sys::fuzz_target;
use shuck_proxy::proxy_protocol::{
    decode, ssl_tlv, tlv, tlvs, Addresses, Parsed, V1_MAX, V2_MAX_RECEIVED,
};

fuzz_target!(|data: &[u8]| {
    match decode(data) {
        Ok(Parsed::Complete { header, len }) => {
            assert!(len <= data.len(), "len {len} > input {}", data.len());
            match header.version {
                1 => {
                    assert!(len <= V1_MAX, "v1 header of {len} bytes exceeds {V1_MAX}");
                    assert!(header.tlvs.is_empty() && !header.local);
                }
                2 => {
                    assert!(len >= 16, "v2 header of {len} bytes");
                    assert!(len <= V2_MAX_RECEIVED, "v2 header of {len} bytes exceeds the limit");
                }
                v => panic!("version {v}"),
            }
            if header.local {
                assert_eq!(header.addrs, Addresses::Unknown);
            }
            assert_eq!(
                decode(&data[..len]),
                Ok(Parsed::Complete { header, len }),
                "the header's own bytes decode differently"
            );
            for cut in 0..len {
                let got = decode(&data[..cut]);
                assert!(
                    matches!(got, Ok(Parsed::Incomplete { .. })),
                    "prefix of {cut} of a {len}-byte header gave {got:?}"
                );
            }
            for t in tlvs(header.tlvs) {
                let (kind, value) = t.expect("accepted header with a bad TLV");
                if kind == tlv::SSL {
                    let ssl = ssl_tlv(value).expect("accepted header with a bad SSL TLV");
                    for sub in tlvs(ssl.sub_tlvs) {
                        sub.expect("accepted header with a bad SSL sub-TLV");
                    }
                }
            }
        }
        Ok(Parsed::Incomplete { total }) => {
            if let Some(total) = total {
                assert!(total > data.len(), "incomplete, yet {total} <= {}", data.len());
                assert!((16..=V2_MAX_RECEIVED).contains(&total), "total {total}");
            }
        }
        Err(e) => {
            // Every refusal has a metric label.
            assert!(!e.label().is_empty());
        }
    }
});
