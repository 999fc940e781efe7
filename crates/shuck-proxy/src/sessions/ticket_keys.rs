//! Ticket keys from files a fleet shares, in the two formats operators already rotate:
//!
//! - nginx `ssl_session_ticket_key`: one raw key per file, 48 bytes (name 16, AES 16, HMAC 16) or
//!   80 bytes (name 16, HMAC 32, AES 32); with several files the first one encrypts.
//! - HAProxy `tls-ticket-keys`: one file, one base64 key per line, 48 bytes (name 16, AES 16,
//!   HMAC 16) or 80 bytes (name 16, AES 32, HMAC 32). The last three keys are used; the
//!   second-to-last encrypts, so a key appended to every host's file decrypts everywhere before
//!   any host encrypts with it (rotate by appending and reloading).
//!
//! shuck's tickets are not OpenSSL's (rustls encodes its own session state), so only the key
//! name and the key material are taken from the file: the 16-byte name is the ticket's key name,
//! and an AES-256-GCM key is derived from the rest with HKDF-SHA256. The two 80-byte layouts
//! differ only in where AES and HMAC sit, which does not change what is derived, but the format
//! still decides which key encrypts. Key bytes never leave this module except inside the derived
//! key; errors name the file and the problem, never the contents.

use std::path::{Path, PathBuf};

use base64::Engine;

use crate::config::TicketKeyFormat;
use crate::error::{Error, Result};

/// Bytes of a key's name (the first bytes of every key in both formats).
pub(crate) const NAME_LEN: usize = 16;

/// How many of a HAProxy file's last keys are used (HAProxy's TLS_TICKETS_NO default).
const HAPROXY_KEYS: usize = 3;

/// One key as read: its name and the secret material after it (32 or 64 bytes).
pub(crate) struct FileKey {
    pub name: [u8; NAME_LEN],
    pub secret: Vec<u8>,
}

impl Drop for FileKey {
    fn drop(&mut self) {
        // Best effort: the bytes do not linger in freed memory.
        self.secret.fill(0);
    }
}

/// The keys of a frontend, in order, and which one encrypts.
pub(crate) struct FileKeys {
    pub keys: Vec<FileKey>,
    pub encrypting: usize,
    /// The format the files were read as (after detection).
    pub format: TicketKeyFormat,
}

impl std::fmt::Debug for FileKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileKeys")
            .field("keys", &self.keys.len())
            .field("encrypting", &self.encrypting)
            .field("format", &self.format)
            .finish()
    }
}

fn key_err(path: &Path, message: impl Into<String>) -> Error {
    Error::TicketKeys {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// Reads the frontend's key files. Several paths are nginx-style files (first encrypts); one
/// path is detected (raw bytes: nginx; base64 lines: HAProxy) unless `format` says which.
pub(crate) fn read(paths: &[PathBuf], format: TicketKeyFormat) -> Result<FileKeys> {
    let mut contents = Vec::with_capacity(paths.len());
    for p in paths {
        let bytes =
            crate::sys::files::read(p).map_err(|e| key_err(p, format!("cannot read: {e}")))?;
        contents.push((p.as_path(), bytes));
    }
    let format = match format {
        TicketKeyFormat::Auto => detect(&contents),
        known => known,
    };
    let keys = match format {
        TicketKeyFormat::Haproxy => {
            let [(path, bytes)] = contents.as_slice() else {
                let first = contents.first().map_or(Path::new(""), |(p, _)| p);
                return Err(key_err(
                    first,
                    "HAProxy-format keys come in one file (one key per line); list several files only in nginx format",
                ));
            };
            let mut keys = haproxy_keys(path, bytes)?;
            let drop_first = keys.len().saturating_sub(HAPROXY_KEYS);
            keys.drain(..drop_first);
            let encrypting = keys.len().saturating_sub(2);
            return Ok(FileKeys {
                keys,
                encrypting,
                format,
            });
        }
        _ => contents
            .iter()
            .map(|(p, b)| nginx_key(p, b))
            .collect::<Result<Vec<_>>>()?,
    };
    Ok(FileKeys {
        keys,
        encrypting: 0,
        format: TicketKeyFormat::Nginx,
    })
}

/// Base64 lines (HAProxy) when every file is text made only of base64 characters, line ends and
/// comments (`openssl base64 -A` writes one line without an end); raw bytes otherwise. Random raw
/// key bytes all falling in the base64 alphabet is a chance of (65/256)^48: never.
fn detect(contents: &[(&Path, Vec<u8>)]) -> TicketKeyFormat {
    let looks_base64 = |b: &[u8]| {
        b.iter().all(|&c| {
            c.is_ascii_alphanumeric()
                || matches!(c, b'+' | b'/' | b'=' | b'\n' | b'\r' | b' ' | b'#')
        })
    };
    if contents.iter().all(|(_, b)| looks_base64(b)) {
        TicketKeyFormat::Haproxy
    } else {
        TicketKeyFormat::Nginx
    }
}

fn nginx_key(path: &Path, bytes: &[u8]) -> Result<FileKey> {
    if bytes.len() != 48 && bytes.len() != 80 {
        return Err(key_err(
            path,
            format!(
                "an nginx-format key file holds exactly 48 or 80 bytes, this one {} (make one with `shuck ticket-key --format nginx FILE` or `openssl rand 80 > FILE`)",
                bytes.len()
            ),
        ));
    }
    Ok(split(bytes))
}

fn haproxy_keys(path: &Path, bytes: &[u8]) -> Result<Vec<FileKey>> {
    let text = std::str::from_utf8(bytes).map_err(|_| {
        key_err(
            path,
            "a HAProxy-format key file is text: one base64 key per line",
        )
    })?;
    let mut keys = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(line)
            .map_err(|_| key_err(path, format!("line {}: not base64", i + 1)))?;
        if decoded.len() != 48 && decoded.len() != 80 {
            return Err(key_err(
                path,
                format!(
                    "line {}: a key is 48 or 80 bytes, this one {}",
                    i + 1,
                    decoded.len()
                ),
            ));
        }
        keys.push(split(&decoded));
    }
    if keys.is_empty() {
        return Err(key_err(path, "no key in the file"));
    }
    Ok(keys)
}

fn split(bytes: &[u8]) -> FileKey {
    let mut name = [0u8; NAME_LEN];
    name.copy_from_slice(&bytes[..NAME_LEN]);
    FileKey {
        name,
        secret: bytes[NAME_LEN..].to_vec(),
    }
}

/// A new random key in `format` (48 or 80 bytes) as the file would hold it: raw bytes for nginx,
/// a base64 line for HAProxy.
pub fn generate(format: TicketKeyFormat, size: usize) -> Result<Vec<u8>, String> {
    if size != 48 && size != 80 {
        return Err(format!("a ticket key is 48 or 80 bytes, not {size}"));
    }
    let mut key = vec![0u8; size];
    aws_lc_rs::rand::fill(&mut key).map_err(|_| "no randomness available".to_string())?;
    Ok(match format {
        TicketKeyFormat::Haproxy | TicketKeyFormat::Auto => {
            let mut line = base64::engine::general_purpose::STANDARD
                .encode(&key)
                .into_bytes();
            line.push(b'\n');
            key.fill(0);
            line
        }
        TicketKeyFormat::Nginx => key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }

    #[test]
    fn formats_are_detected_and_the_right_key_encrypts() {
        let dir = tempfile::tempdir().unwrap();
        let raw = generate(TicketKeyFormat::Nginx, 80).unwrap();
        let nginx = write(dir.path(), "k.key", &raw);
        let keys = read(std::slice::from_ref(&nginx), TicketKeyFormat::Auto).unwrap();
        assert_eq!(keys.format, TicketKeyFormat::Nginx);
        assert_eq!(keys.keys[0].name[..], raw[..16]);
        assert_eq!(keys.keys[0].secret[..], raw[16..]);

        let mut lines = Vec::new();
        for _ in 0..4 {
            lines.extend(generate(TicketKeyFormat::Haproxy, 48).unwrap());
        }
        let haproxy = write(dir.path(), "keys.txt", &lines);
        let keys = read(std::slice::from_ref(&haproxy), TicketKeyFormat::Auto).unwrap();
        assert_eq!(keys.format, TicketKeyFormat::Haproxy);
        assert_eq!(keys.keys.len(), 3, "the last three");
        assert_eq!(keys.encrypting, 1, "the second-to-last encrypts");
        let third_line = std::str::from_utf8(&lines).unwrap().lines().nth(2).unwrap();
        let third = base64::engine::general_purpose::STANDARD
            .decode(third_line)
            .unwrap();
        assert_eq!(keys.keys[1].name[..], third[..16]);

        // Forcing a format: the base64 file read as raw bytes is refused for its length.
        let e = read(&[haproxy], TicketKeyFormat::Nginx)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exactly 48 or 80 bytes"), "{e}");
        // Bad files are named, their contents never shown.
        let bad = write(dir.path(), "bad.txt", b"bm90IGEga2V5\n");
        let e = read(&[bad], TicketKeyFormat::Auto).unwrap_err().to_string();
        assert!(
            e.contains("bad.txt") && e.contains("line 1") && !e.contains("bm90"),
            "{e}"
        );
        let short = write(dir.path(), "short.key", &raw[..40]);
        let e = read(&[short], TicketKeyFormat::Auto)
            .unwrap_err()
            .to_string();
        assert!(e.contains("short.key") && e.contains("40"), "{e}");
        // One line without an end, as `openssl rand 48 | openssl base64 -A` writes it.
        let line = generate(TicketKeyFormat::Haproxy, 48).unwrap();
        let bare = write(dir.path(), "bare.txt", line.trim_ascii_end());
        let keys = read(&[bare], TicketKeyFormat::Auto).unwrap();
        assert_eq!(
            (keys.format, keys.keys.len()),
            (TicketKeyFormat::Haproxy, 1)
        );
        // Several nginx files: the first encrypts.
        let other = write(
            dir.path(),
            "old.key",
            &generate(TicketKeyFormat::Nginx, 48).unwrap(),
        );
        let keys = read(&[nginx, other], TicketKeyFormat::Auto).unwrap();
        assert_eq!((keys.keys.len(), keys.encrypting), (2, 0));
    }
}
