//! The one module with `unsafe`: what neither socket2, nix nor rustix names. TCP_DEFER_ACCEPT, set
//! and read with `libc::setsockopt`/`getsockopt` on a listening socket we own; and on a kTLS
//! socket, a record of a type other than application data (an alert, a KeyUpdate), which takes
//! `sendmsg` with a TLS_SET_RECORD_TYPE control message (nix reads that message's twin, the
//! record type of what arrives, but cannot send one). Everything else in the workspace forbids
//! `unsafe`; nothing else goes here. Also SIOCOUTQ, the bytes a TCP socket has sent or queued and
//! the peer has not acknowledged (an `ioctl`, which nix offers only as macros that generate
//! `unsafe` functions).
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd};

/// Sets TCP_DEFER_ACCEPT to `secs` seconds (0 clears it).
pub(crate) fn set_tcp_defer_accept(socket: &impl AsFd, secs: libc::c_int) -> io::Result<()> {
    let fd = socket.as_fd().as_raw_fd();
    let len = libc::socklen_t::try_from(size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is open for the call (borrowed from `socket`); the kernel reads exactly `len`
    // bytes, the size of the `c_int` the pointer points to, which outlives the call.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_ref(&secs).cast(),
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// TCP_DEFER_ACCEPT as the kernel holds it (seconds, rounded to its retransmission steps).
#[cfg(test)]
pub(crate) fn tcp_defer_accept(socket: &impl AsFd) -> io::Result<libc::c_int> {
    let fd = socket.as_fd().as_raw_fd();
    let mut value: libc::c_int = 0;
    let mut len = libc::socklen_t::try_from(size_of::<libc::c_int>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is open for the call; the kernel writes at most `len` bytes, the size of
    // `value`, and stores the length it wrote in `len`; both outlive the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_DEFER_ACCEPT,
            std::ptr::from_mut(&mut value).cast(),
            std::ptr::from_mut(&mut len),
        )
    };
    if rc == 0 {
        Ok(value)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Sends `payload` as one TLS record of `content_type` on a socket whose transmit side kTLS
/// protects, without waiting: `WouldBlock` when the socket's buffer is full. The bytes taken
/// (all of them, or an error: the kernel takes a record whole).
pub(crate) fn send_tls_record(
    socket: &impl AsFd,
    content_type: u8,
    payload: &[u8],
) -> io::Result<usize> {
    let fd = socket.as_fd().as_raw_fd();
    let one = libc::c_uint::try_from(size_of::<u8>())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Room for one control message of one byte, aligned for `cmsghdr` (CMSG_SPACE(1) is 24
    // bytes on 64-bit Linux; 64 covers any layout).
    let mut control = [0u64; 8];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr().cast_mut().cast(),
        iov_len: payload.len(),
    };
    // SAFETY: an all-zero `msghdr` is valid (null pointers, zero lengths). Every pointer set
    // below points to memory that outlives the `sendmsg` call: `iov` (whose base is `payload`,
    // which the kernel only reads), `control` (64 bytes, 8-aligned, of which CMSG_SPACE(1) are
    // declared). CMSG_FIRSTHDR of a control buffer at least one `cmsghdr` long is non-null and
    // in bounds, and CMSG_DATA(cmsg) points at the byte after its header, inside CMSG_LEN(1).
    let rc = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = std::ptr::from_mut(&mut iov);
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = libc::CMSG_SPACE(one) as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        (*cmsg).cmsg_level = libc::SOL_TLS;
        (*cmsg).cmsg_type = libc::TLS_SET_RECORD_TYPE;
        (*cmsg).cmsg_len = libc::CMSG_LEN(one) as _;
        *libc::CMSG_DATA(cmsg) = content_type;
        libc::sendmsg(fd, &raw const msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    usize::try_from(rc).map_err(|_| io::Error::last_os_error())
}

/// Bytes in a TCP socket's send queue that the peer has not acknowledged yet: sent and unacked,
/// or not sent (SIOCOUTQ).
pub(crate) fn unacknowledged(socket: &impl AsFd) -> io::Result<usize> {
    let fd = socket.as_fd().as_raw_fd();
    let mut queued: libc::c_int = 0;
    // SAFETY: `fd` is open for the call (borrowed from `socket`); SIOCOUTQ writes one `c_int`
    // through the pointer, to `queued`, which outlives the call.
    let rc = unsafe { libc::ioctl(fd, libc::TIOCOUTQ, std::ptr::from_mut(&mut queued)) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    usize::try_from(queued).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// The sequence number of the next record the kernel seals on a kTLS socket: the `rec_seq` of
/// what `getsockopt(SOL_TLS, TLS_TX)` returns (nix sets TLS_TX but cannot read it). `size` is
/// the size of the socket's `tls12_crypto_info_*` (see [`ktls_info_size`]): the kernel answers
/// EINVAL to any other. The kernel returns the keys too; they are zeroed here before returning.
pub(crate) fn ktls_tx_seq(socket: &impl AsFd, size: usize) -> io::Result<u64> {
    let fd = socket.as_fd().as_raw_fd();
    // Room for the largest of the three TLS 1.3 structures (56 bytes).
    let mut info = zeroize::Zeroizing::new([0u8; 56]);
    let size = size.min(info.len());
    let mut len = libc::socklen_t::try_from(size)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `fd` is open for the call (borrowed from `socket`); the kernel writes at most
    // `len` bytes to `info`, which is `len` bytes long and outlives the call, and updates
    // `len`, a `socklen_t` that outlives it too.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_TLS,
            libc::TLS_TX,
            info.as_mut_ptr().cast(),
            std::ptr::from_mut(&mut len),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    rec_seq(&info[..size]).ok_or_else(|| io::Error::other("ktls: an unknown cipher in TLS_TX"))
}

/// The size of the kernel's `tls12_crypto_info_*` for a TLS 1.3 cipher, by its
/// `TLS_CIPHER_*` number.
pub(crate) fn ktls_info_size(cipher_type: u16) -> Option<usize> {
    Some(match cipher_type {
        libc::TLS_CIPHER_AES_GCM_128 => size_of::<libc::tls12_crypto_info_aes_gcm_128>(),
        libc::TLS_CIPHER_AES_GCM_256 => size_of::<libc::tls12_crypto_info_aes_gcm_256>(),
        libc::TLS_CIPHER_CHACHA20_POLY1305 => {
            size_of::<libc::tls12_crypto_info_chacha20_poly1305>()
        }
        _ => return None,
    })
}

/// `rec_seq` in a kernel `tls12_crypto_info_*`: after the version and cipher (two `u16`), the
/// IV, key and salt of its cipher.
fn rec_seq(info: &[u8]) -> Option<u64> {
    let cipher = u16::from_ne_bytes([*info.get(2)?, *info.get(3)?]);
    let at = match cipher {
        libc::TLS_CIPHER_AES_GCM_128 => 4 + 8 + 16 + 4,
        // 4 + 8 + 32 + 4 and 4 + 12 + 32 (no salt).
        libc::TLS_CIPHER_AES_GCM_256 | libc::TLS_CIPHER_CHACHA20_POLY1305 => 48,
        _ => return None,
    };
    Some(u64::from_be_bytes(info.get(at..at + 8)?.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets agree with libc's layout of each structure.
    #[test]
    fn rec_seq_is_read_where_each_cipher_keeps_it() {
        let seq = 0x0102_0304_0506_0708_u64.to_be_bytes();
        let aes128 = libc::tls12_crypto_info_aes_gcm_128 {
            info: libc::tls_crypto_info {
                version: libc::TLS_1_3_VERSION,
                cipher_type: libc::TLS_CIPHER_AES_GCM_128,
            },
            iv: [1; 8],
            key: [2; 16],
            salt: [3; 4],
            rec_seq: seq,
        };
        let aes256 = libc::tls12_crypto_info_aes_gcm_256 {
            info: libc::tls_crypto_info {
                version: libc::TLS_1_3_VERSION,
                cipher_type: libc::TLS_CIPHER_AES_GCM_256,
            },
            iv: [1; 8],
            key: [2; 32],
            salt: [3; 4],
            rec_seq: seq,
        };
        let chacha = libc::tls12_crypto_info_chacha20_poly1305 {
            info: libc::tls_crypto_info {
                version: libc::TLS_1_3_VERSION,
                cipher_type: libc::TLS_CIPHER_CHACHA20_POLY1305,
            },
            iv: [1; 12],
            key: [2; 32],
            salt: [],
            rec_seq: seq,
        };
        assert_eq!(rec_seq(&bytes_of(&aes128)), Some(0x0102_0304_0506_0708));
        assert_eq!(rec_seq(&bytes_of(&aes256)), Some(0x0102_0304_0506_0708));
        assert_eq!(rec_seq(&bytes_of(&chacha)), Some(0x0102_0304_0506_0708));
        assert_eq!(rec_seq(&[0, 0, 0x55, 0x55]), None);
        // The kernel takes exactly these sizes (anything else: EINVAL).
        assert_eq!(ktls_info_size(libc::TLS_CIPHER_AES_GCM_128), Some(40));
        assert_eq!(ktls_info_size(libc::TLS_CIPHER_AES_GCM_256), Some(56));
        assert_eq!(ktls_info_size(libc::TLS_CIPHER_CHACHA20_POLY1305), Some(56));
    }

    /// A structure's bytes, as the kernel would write them.
    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: `value` is a plain C structure of integers and byte arrays with no padding
        // (each is packed by its fields' sizes), readable as `size_of::<T>()` bytes.
        unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(value).cast::<u8>(), size_of::<T>())
        }
        .to_vec()
    }
}
