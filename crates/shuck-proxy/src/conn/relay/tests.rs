//! The relay against recorded and scripted ends: reads flushed together, a PROXY header sent
//! with the first bytes, half-closes, idle timeouts, the worker ending the relay it frees, and
//! which backend failures are seen.

use super::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A backend end that records each write call separately.
#[derive(Default)]
struct Writes(Vec<Vec<u8>>);

impl AsyncRead for Writes {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(())) // EOF: the backend says nothing
    }
}

impl AsyncWrite for Writes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.push(buf.to_vec());
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A reader with `sizes` ready, one per read (a 0 is one Pending: nothing for now), then
/// at its end when `eof`, else with nothing for now (Pending) from then on.
struct Chunks {
    sizes: Vec<usize>,
    eof: bool,
}

impl Chunks {
    fn then_wait(sizes: Vec<usize>) -> Chunks {
        Chunks { sizes, eof: false }
    }

    fn then_eof(sizes: Vec<usize>) -> Chunks {
        Chunks { sizes, eof: true }
    }
}

impl AsyncRead for Chunks {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.sizes.is_empty() {
            return if self.eof {
                Poll::Ready(Ok(()))
            } else {
                Poll::Pending
            };
        }
        let n = self.sizes.remove(0);
        if n == 0 {
            return Poll::Pending;
        }
        buf.put_slice(&vec![b'x'; n.min(buf.remaining())]);
        Poll::Ready(Ok(()))
    }
}

/// What a writer was asked, in order.
#[derive(Debug, PartialEq)]
enum Did {
    Write(usize),
    Flush,
    Shutdown,
}

#[derive(Default)]
struct Log(Vec<Did>);

impl AsyncWrite for Log {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.push(Did::Write(buf.len()));
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.push(Did::Flush);
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.push(Did::Shutdown);
        Poll::Ready(Ok(()))
    }
}

/// An answer whose end has already arrived behind it (an HTTP/1.0 backend's answer and FIN)
/// goes out with the shutdown, no flush between: the TLS stream sends the last record and
/// close_notify in one system call instead of two.
#[test]
fn an_answer_followed_by_its_end_leaves_with_the_shutdown() {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let mut reader = Chunks::then_eof(vec![1024]);
    let mut writer = Log::default();
    let mut pump = Pump::new(false);
    let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut false, false);
    assert!(polled.is_ready());
    assert_eq!(writer.0, [Did::Write(1024), Did::Shutdown]);
}

/// A writer whose shutdown fails with `kind` (its flush, part of it, included).
struct FailingShutdown(io::ErrorKind);

impl AsyncWrite for FailingShutdown {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Err(self.0.into()))
    }
}

/// When the shutdown carries the last bytes, its failure is the writer's error; when
/// everything had gone out before, a failed shutdown only ends the direction.
#[test]
fn a_failed_send_in_the_shutdown_is_a_write_error() {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    for (answer, is_error) in [(vec![100], true), (vec![], false)] {
        let mut pump = Pump::new(false);
        let mut writer = FailingShutdown(io::ErrorKind::BrokenPipe);
        let polled = pump.poll(
            &mut cx,
            &mut Chunks::then_eof(answer.clone()),
            &mut writer,
            &mut false,
            false,
        );
        let failed = matches!(polled, Poll::Ready(Err(PumpError::Write(_))));
        assert_eq!(failed, is_error, "{answer:?}");
        assert!(pump.done() || failed);
    }
}

/// What the reader has ready is written without a flush in between (so the TLS stream can
/// gather full records), and flushed once the reader has nothing more for now.
#[test]
fn reads_are_flushed_together_when_the_reader_waits() {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    let full = crate::mem::buf_pool::BUF_SIZE;
    let mut reader = Chunks::then_wait(vec![full, full, full, 1000, 0, full]);
    let mut writer = Log::default();
    let mut pump = Pump::new(false);
    let mut moved = false;
    let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut moved, false);
    assert!(polled.is_pending());
    let polled = pump.poll(&mut cx, &mut reader, &mut writer, &mut moved, false);
    assert!(polled.is_pending());
    let want = [
        Did::Write(full),
        Did::Write(full),
        Did::Write(full),
        Did::Write(1000),
        Did::Flush,
        Did::Write(full),
        Did::Flush,
    ];
    assert_eq!(writer.0, want);
}

fn prefix(bytes: &[u8]) -> (PooledBuf, usize) {
    let mut b = PooledBuf::at_least(bytes.len());
    b.bytes_mut()[..bytes.len()].copy_from_slice(bytes);
    (b, bytes.len())
}

#[tokio::test]
async fn prefix_and_bytes_already_sent_leave_in_one_write() {
    let (mut client, mut proxy_client) = tokio::io::duplex(4096);
    client.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
    client.shutdown().await.unwrap();
    let mut backend = Writes::default();
    let (moved, res) = relay_with_prefix(
        &mut proxy_client,
        &mut backend,
        (Duration::from_secs(5), &()),
        Some(prefix(b"PROXY UNKNOWN\r\n")),
        |_| {},
    )
    .await;
    res.unwrap();
    assert_eq!(backend.0[0], b"PROXY UNKNOWN\r\nGET / HTTP/1.0\r\n\r\n");
    assert_eq!(backend.0.len(), 1, "{:?}", backend.0);
    assert_eq!(moved.up, 18, "the header is not client data");
}

#[tokio::test]
async fn prefix_goes_out_alone_when_the_client_is_silent() {
    // A server-speaks-first backend: the header must not wait for the client.
    let (mut client, mut proxy_client) = tokio::io::duplex(4096);
    let (mut proxy_backend, mut backend) = tokio::io::duplex(4096);
    let relay = tokio::spawn(async move {
        relay_with_prefix(
            &mut proxy_client,
            &mut proxy_backend,
            (Duration::from_secs(5), &()),
            Some(prefix(b"HEADER")),
            |_| {},
        )
        .await
    });
    let mut got = [0u8; 6];
    backend.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"HEADER");
    backend.write_all(b"220 hello").await.unwrap();
    backend.shutdown().await.unwrap();
    let mut greeting = [0u8; 9];
    client.read_exact(&mut greeting).await.unwrap();
    assert_eq!(&greeting, b"220 hello");
    client.write_all(b"QUIT").await.unwrap();
    client.shutdown().await.unwrap();
    let mut rest = Vec::new();
    backend.read_to_end(&mut rest).await.unwrap();
    assert_eq!(rest, b"QUIT");
    relay.await.unwrap().1.unwrap();
}

#[tokio::test]
async fn relays_both_ways_with_half_close_and_returns_buffers() {
    let (mut client, mut proxy_client) = tokio::io::duplex(1024);
    let (mut proxy_backend, mut backend) = tokio::io::duplex(1024);
    let relay = tokio::spawn(async move {
        relay(
            &mut proxy_client,
            &mut proxy_backend,
            Duration::from_secs(5),
        )
        .await
    });
    let up: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    let up2 = up.clone();
    let be = tokio::spawn(async move {
        let mut got = Vec::new();
        backend.read_to_end(&mut got).await.unwrap();
        // The client's EOF arrived; the reply still flows back.
        backend.write_all(b"reply after half-close").await.unwrap();
        backend.shutdown().await.unwrap();
        got
    });
    client.write_all(&up).await.unwrap();
    client.shutdown().await.unwrap();
    let mut reply = Vec::new();
    client.read_to_end(&mut reply).await.unwrap();
    assert_eq!(reply, b"reply after half-close");
    assert_eq!(be.await.unwrap(), up2);
    let (moved, res) = relay.await.unwrap();
    res.unwrap();
    assert_eq!(moved.up, 100_000);
    assert_eq!(moved.down, 22);
}

#[tokio::test]
async fn a_backend_that_answers_and_closes_early_still_gets_its_answer_through() {
    let (mut client, mut proxy_client) = tokio::io::duplex(4096);
    let (mut proxy_backend, mut backend) = tokio::io::duplex(4096);
    // The backend refuses the upload: it answers, then goes away without reading.
    backend.write_all(b"HTTP/1.1 413 Too Large").await.unwrap();
    drop(backend);
    // The client's upload is already on its way when the relay starts.
    client.write_all(&[b'x'; 1000]).await.unwrap();
    let relay = tokio::spawn(async move {
        relay(
            &mut proxy_client,
            &mut proxy_backend,
            Duration::from_secs(5),
        )
        .await
    });
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert_eq!(answer, b"HTTP/1.1 413 Too Large");
    let (moved, res) = relay.await.unwrap();
    assert!(matches!(res, Err(RelayError::Backend(_))), "{res:?}");
    assert_eq!(moved.down, 22);
}

/// On tokio's paused clock: the default idle timeout (5 minutes) is checked as configured,
/// in no time, and not a moment early.
#[tokio::test(start_paused = true)]
async fn idle_timeout_fires_when_idle_and_not_before() {
    let idle = Duration::from_secs(300);
    let (mut client, mut proxy_client) = tokio::io::duplex(64);
    let (mut proxy_backend, mut backend) = tokio::io::duplex(64);
    let started = Instant::now();
    let relay =
        tokio::spawn(async move { relay(&mut proxy_client, &mut proxy_backend, idle).await.1 });
    // Traffic at 200 s keeps the connection: the timeout counts from the last byte.
    tokio::time::sleep(Duration::from_secs(200)).await;
    client.write_all(b"ping").await.unwrap();
    let mut got = [0u8; 4];
    backend.read_exact(&mut got).await.unwrap();
    let res = relay.await.unwrap();
    assert!(matches!(res, Err(RelayError::Idle(_))), "{res:?}");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(500) && took < Duration::from_secs(502),
        "cut after {took:?}: 300 s after the last byte at 200 s"
    );
}

/// A registered relay tells the worker when bytes last moved, and ends when the worker
/// frees its slot: a connection that moved bytes after the others is kept.
#[tokio::test(start_paused = true)]
async fn the_worker_ends_the_relay_it_frees_and_keeps_a_busier_one() {
    let set = crate::conn::idle::IdleSet::default();
    let source: std::net::IpAddr = "192.0.2.9".parse().unwrap();
    let (_quiet, mut quiet_proxy) = tokio::io::duplex(64);
    let (mut busy, mut busy_proxy) = tokio::io::duplex(64);
    let (mut b1, _b1) = tokio::io::duplex(64);
    let (mut b2, _b2) = tokio::io::duplex(64);
    let (quiet_reg, busy_reg) = (set.register(source, ()), set.register(source, ()));
    let idle = Duration::from_secs(300);
    let quiet = relay_with_prefix(&mut quiet_proxy, &mut b1, (idle, &quiet_reg), None, |_| {});
    let busy_relay = relay_with_prefix(&mut busy_proxy, &mut b2, (idle, &busy_reg), None, |_| {});
    tokio::pin!(busy_relay);
    let freeing = async {
        tokio::time::sleep(Duration::from_secs(20)).await;
        busy.write_all(b"ping").await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        set.free(1, Duration::from_secs(5))
    };
    let ((_, quiet_end), freed) = tokio::select! {
        r = async { tokio::join!(quiet, freeing) } => r,
        r = &mut busy_relay => panic!("the busier relay ended: {r:?}"),
    };
    assert_eq!(freed.closed, 1);
    assert!(
        matches!(quiet_end, Err(RelayError::Evicted { in_flight: false })),
        "{quiet_end:?}"
    );
}

#[test]
fn only_a_backend_that_broke_before_answering_is_seen_failing() {
    let moved = |down| Moved { up: 10, down };
    let err = |kind: io::ErrorKind| io::Error::from(kind);
    let reset = || err(io::ErrorKind::ConnectionReset);
    let seen = |down, res: Result<(), RelayError>| backend_seen(moved(down), &res);
    assert_eq!(
        seen(0, Err(RelayError::BackendAborted(reset()))),
        Seen::Failed
    );
    let pipe = RelayError::Backend(err(io::ErrorKind::BrokenPipe));
    assert_eq!(seen(0, Err(pipe)), Seen::Failed);
    // It answered, then broke: not counted either way.
    assert_eq!(
        seen(5, Err(RelayError::BackendAborted(reset()))),
        Seen::Nothing
    );
    // This host's trouble is no backend's failure.
    let no_buffers = RelayError::Backend(io::Error::from_raw_os_error(libc::ENOBUFS));
    assert_eq!(seen(0, Err(no_buffers)), Seen::Nothing);
    // It answered and the client went away, or idled: the backend did its part.
    assert_eq!(
        seen(5, Err(RelayError::ClientAborted(reset()))),
        Seen::Answered
    );
    let idle = Duration::from_secs(1);
    assert_eq!(seen(5, Err(RelayError::Idle(idle))), Seen::Answered);
    // The client went away, or idled, before the backend said anything: nothing to judge.
    assert_eq!(
        seen(0, Err(RelayError::ClientAborted(reset()))),
        Seen::Nothing
    );
    assert_eq!(seen(0, Err(RelayError::Idle(idle))), Seen::Nothing);
    // Ended in order (a client that only sends, a backend that only listens).
    assert_eq!(seen(0, Ok(())), Seen::Answered);
}
