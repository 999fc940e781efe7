//! The one module with `unsafe`: TCP_DEFER_ACCEPT, a socket option that neither socket2, nix nor
//! rustix names, set and read with `libc::setsockopt`/`getsockopt` on a listening socket we own.
//! Everything else in the workspace forbids `unsafe`; nothing else goes here.
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
