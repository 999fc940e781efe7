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
pub fn set_tcp_defer_accept(socket: &impl AsFd, secs: libc::c_int) -> io::Result<()> {
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
pub fn tcp_defer_accept(socket: &impl AsFd) -> io::Result<libc::c_int> {
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
pub fn send_tls_record(socket: &impl AsFd, content_type: u8, payload: &[u8]) -> io::Result<usize> {
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
pub fn unacknowledged(socket: &impl AsFd) -> io::Result<usize> {
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
