//! One backend connection: a non-blocking connect with TCP_NODELAY set before it, finished by the
//! socket's readiness. tokio's own `TcpStream::connect` asks for SO_ERROR after every connect,
//! a `getsockopt` per connection even when the readiness already said all is well; here it is
//! asked only when the readiness reports an error or a hang-up, the only ways Linux tells a
//! failed connect (the RST, ICMP error or SYN timeout sets the socket's error, and epoll reports
//! EPOLLERR with it).

use std::io;
use std::net::SocketAddr;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// Connects to `addr`; the stream returned has Nagle off (small answers would otherwise wait
/// ~40 ms for an ACK: the stud latency of Bernat's second round).
pub(super) async fn connect(addr: SocketAddr) -> io::Result<TcpStream> {
    let socket = Socket::new(
        Domain::for_address(addr),
        Type::STREAM.nonblocking(),
        Some(Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    let ready = stream.ready(Interest::WRITABLE | Interest::ERROR).await?;
    if ready.is_error() || ready.is_write_closed() {
        return Err(stream.take_error()?.unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotConnected,
                "connect ended without a connection",
            )
        }));
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_listening_address_gives_a_connected_stream_without_nagle() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let s = connect(l.local_addr().unwrap()).await.unwrap();
        assert!(s.nodelay().unwrap());
        assert_eq!(s.peer_addr().unwrap(), l.local_addr().unwrap());
        let (mut accepted, _) = l.accept().await.unwrap();
        s.try_write(b"ping").unwrap();
        let mut buf = [0u8; 4];
        tokio::io::AsyncReadExt::read_exact(&mut accepted, &mut buf)
            .await
            .unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[tokio::test]
    async fn a_refused_connect_is_an_error_of_its_kind() {
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = connect(dead).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[tokio::test]
    async fn ipv6_loopback_works_too() {
        let Ok(l) = tokio::net::TcpListener::bind("[::1]:0").await else {
            return; // no IPv6 on this host
        };
        let s = connect(l.local_addr().unwrap()).await.unwrap();
        assert!(s.peer_addr().unwrap().is_ipv6());
    }
}
