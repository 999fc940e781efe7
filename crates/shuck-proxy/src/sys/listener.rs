//! Listening sockets: one per worker per address, with SO_REUSEPORT so the kernel spreads new
//! connections over workers without a shared accept lock (the stud/nginx shared-nothing model).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{Domain, Protocol, Socket, Type};

use crate::sys::sockopt;

/// Makes `accept()` return a connection only once its client has sent something (its
/// ClientHello, or a load balancer's PROXY header), or after `wait` with nothing: a client that
/// connects and stays silent (a port scan, a TCP health check) costs no descriptor, task or
/// wake-up until then, and `accept()` hands the rest over with their first bytes already
/// readable. Zero turns it off. The kernel rounds up to whole SYN-ACK retransmissions.
pub(crate) fn set_defer_accept(socket: &std::net::TcpListener, wait: Duration) -> io::Result<()> {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    // The kernel reads an int: a larger value would wrap to "off" (config caps it at 60 s).
    let secs = libc::c_int::try_from(secs).unwrap_or(libc::c_int::MAX);
    sockopt::set_tcp_defer_accept(socket, secs)
}

/// Resizes a listening socket's accept queue: `listen()` on a socket already listening keeps
/// the connections queued and takes the new size.
pub(crate) fn set_backlog(socket: &std::net::TcpListener, backlog: u32) -> io::Result<()> {
    socket2::SockRef::from(socket).listen(i32::try_from(backlog).unwrap_or(i32::MAX))
}

pub(crate) fn bind(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        // So "[::]:443" and "0.0.0.0:443" can both be listed, each with its own socket.
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// True when something already listens on `addr` (another shuck, or a forgotten instance):
/// with SO_REUSEPORT our bind would succeed anyway and the kernel would split connections
/// between the two, so the caller warns. Binding without SO_REUSEPORT (but with SO_REUSEADDR, so
/// TIME_WAIT leftovers do not count) fails exactly in that case.
pub(crate) fn in_use(addr: SocketAddr) -> bool {
    let probe = || -> io::Result<()> {
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        if addr.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.set_reuse_address(true)?;
        socket.bind(&addr.into())
    };
    matches!(probe(), Err(e) if e.kind() == io::ErrorKind::AddrInUse)
}

/// Whether this host can listen on IPv6 (its loopback answers): `*:port` then means `[::]`
/// too. A host with IPv6 turned off, or a container without it, listens on IPv4 alone.
pub(crate) fn host_has_ipv6() -> bool {
    std::net::TcpListener::bind((std::net::Ipv6Addr::LOCALHOST, 0)).is_ok()
}

/// Accept errors that mean "this one connection went away": retry at once.
pub(crate) fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

#[cfg(test)]
mod tests {
    /// The connection stage sets no TCP_NODELAY on accepted sockets: it relies on Linux copying
    /// it from the listening socket, which this checks.
    #[test]
    fn accepted_sockets_inherit_tcp_nodelay() {
        let listener = super::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        listener.set_nonblocking(false).unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert!(socket2::SockRef::from(&accepted).tcp_nodelay().unwrap());
    }

    /// The option reaches the kernel in whole seconds (rounded up, then to the kernel's
    /// retransmission steps), and zero turns it off.
    #[test]
    fn defer_accept_is_set_in_seconds_and_zero_clears_it() {
        use crate::sys::sockopt::tcp_defer_accept;
        use std::time::Duration;
        let listener = super::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        assert_eq!(tcp_defer_accept(&listener).unwrap(), 0);
        super::set_defer_accept(&listener, Duration::from_millis(300)).unwrap();
        assert!(tcp_defer_accept(&listener).unwrap() >= 1);
        super::set_defer_accept(&listener, Duration::ZERO).unwrap();
        assert_eq!(tcp_defer_accept(&listener).unwrap(), 0);
    }

    /// The queue size `ss` reports for a listening socket (its Send-Q column).
    fn queue_size(port: u16) -> u32 {
        let out = std::process::Command::new("ss")
            .args(["-ltnH", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2)");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let fields: Vec<&str> = text.split_whitespace().collect();
        fields
            .get(2)
            .and_then(|f| f.parse().ok())
            .unwrap_or_else(|| panic!("ss said {text:?}"))
    }

    /// A reload's new `backlog` reaches a socket already listening.
    #[test]
    fn the_backlog_of_a_listening_socket_can_be_changed() {
        let listener = super::bind("127.0.0.1:0".parse().unwrap(), 16).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(queue_size(port), 16);
        super::set_backlog(&listener, 77).unwrap();
        assert_eq!(queue_size(port), 77);
    }
}
