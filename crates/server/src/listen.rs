//! The accept loop, with the limits a server on a desktop needs against slow or hostile
//! clients: at most `max_connections` at once (the rest wait in the kernel's backlog), at most
//! [`Admission::connections_per_peer`] of them from one peer (past it a connection is answered
//! 503 at once and closed), and a connection that does not send its request head in
//! `header_timeout` (a slowloris, or an idle keep-alive) is closed. A request body must arrive
//! within `body_timeout` or keep up [`Admission::min_body_rate`] after it (408 otherwise): that
//! rule is enforced where bodies are read, in the crate's `Body` extractor.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    /// The grace a request body has to arrive whole; past it, a body still arriving must have
    /// averaged [`Admission::min_body_rate`] since (see [`Admission`]). 408 otherwise.
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_connections: 256, header_timeout: Duration::from_secs(10), body_timeout: Duration::from_secs(30) }
    }
}

/// How requests are let in, beyond [`Limits`] (kept apart from it, so that code which builds a
/// `Limits` field by field still compiles). [`Admission::default`] is what `specula serve` uses.
///
/// A request body costs no CPU while it arrives, only a socket and its bytes; parsing it costs
/// CPU and several times its size in memory. So a body is read whole first, holding nothing
/// shared, and only then waits for one of `parsers` turns to be parsed; a slow body cannot
/// hold a turn. Reading is bounded in time by a minimum rate after a grace period: at any
/// moment `t` after the request head, at least `min_body_rate * (t - body_timeout)` bytes must
/// have come. A body of any size sent in one go (under 30 s by default) passes, a large body
/// from a slow link passes as long as it averages the rate, and a body dripped a byte at a time
/// (the slow-body attack: a byte every 29 s never trips an idle timeout) is answered 408 at
/// `body_timeout`. With the 8 MiB body cap no body is read for longer than `body_timeout` +
/// 8 MiB / `min_body_rate` (158 s by default).
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    /// Connections one peer may hold open at once: one IPv4 address, one IPv6 /64, and every
    /// loopback address together (any local process can connect from any of 127.0.0.0/8).
    /// Past it a new connection is answered 503 `too_many_connections` with Retry-After and
    /// closed, so one peer cannot take all of `max_connections`.
    pub connections_per_peer: usize,
    /// Bytes per second a request body must average after [`Limits::body_timeout`].
    pub min_body_rate: usize,
    /// Request bodies parsed at once.
    pub parsers: usize,
    /// How long a request whose body has arrived waits for a parser before a 503
    /// `server_busy` with Retry-After; parsers all busy for this long make `/health` say
    /// `degraded`.
    pub parse_wait: Duration,
}

impl Default for Admission {
    fn default() -> Self {
        Self {
            connections_per_peer: 32,
            min_body_rate: 64 << 10,
            parsers: crate::BODIES_PARSED_AT_ONCE,
            parse_wait: Duration::from_secs(10),
        }
    }
}

/// Serve `app` on `listener` until `shutdown` completes, with [`Admission::default`].
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    serve_with(listener, app, limits, Admission::default(), shutdown).await
}

/// Refusals being written at once; past this many a refused connection is closed unanswered.
const REFUSALS_AT_ONCE: usize = 64;
/// How long a refusal waits for its client to read the answer and close.
const REFUSAL_LINGER: Duration = Duration::from_secs(1);

/// Serve `app` on `listener` until `shutdown` completes.
pub async fn serve_with(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    admission: Admission,
    shutdown: impl Future<Output = ()>,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let refusals = Arc::new(Semaphore::new(REFUSALS_AT_ONCE));
    let peers = Arc::new(Peers { cap: admission.connections_per_peer.max(1), open: Mutex::default() });
    let refusal = Arc::<[u8]>::from(refusal(admission.connections_per_peer.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors, say: wait, do not spin or stop.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let Some(slot) = peers.enter(peer.ip()) else {
            drop(permit);
            tracing::debug!("refused a connection from {peer}: {} open from it", peers.cap);
            // Answered without holding a connection permit, a bounded number at a time.
            if let Ok(turn) = refusals.clone().try_acquire_owned() {
                let refusal = refusal.clone();
                tokio::spawn(async move {
                    refuse(stream, &refusal).await;
                    drop(turn);
                });
            }
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!("connection closed: {e}");
            }
            drop((slot, permit));
        });
    }
}

/// The 503 a connection past its peer's cap gets, whatever it asks, in the API's error shape.
fn refusal(cap: usize) -> Vec<u8> {
    let mut error = crate::ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "server_error",
        "too_many_connections",
        format!("Too many connections from your address: at most {cap} at once. Close some, or retry shortly."),
    );
    error.retry_after = Some(RETRY_AFTER_S);
    let body = error.body().to_string();
    let head = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: {RETRY_AFTER_S}\r\n\
         x-frame-options: DENY\r\ncontent-security-policy: frame-ancestors 'none'\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n",
        body.len()
    );
    [head.into_bytes(), body.into_bytes()].concat()
}

const RETRY_AFTER_S: u64 = 2;

/// Answer without reading the request (which may never come), then close gracefully: the
/// client's request is read and dropped for a moment, so that the close is a FIN after the
/// answer rather than a reset that could destroy it.
async fn refuse(mut stream: TcpStream, refusal: &[u8]) {
    let _ = tokio::time::timeout(REFUSAL_LINGER, async {
        stream.write_all(refusal).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < 64 << 10 {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        std::io::Result::Ok(())
    })
    .await;
}

/// Connections open per peer.
struct Peers {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

/// One open connection of a peer, given back when dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    key: IpAddr,
}

impl Peers {
    /// A slot for a connection from `ip`, or `None` when its peer has `cap` open.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let key = peer_of(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(key).or_default();
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(PeerSlot { peers: self.clone(), key })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.key);
            }
        }
    }
}

/// The peer an address belongs to: loopback addresses are all one (this machine), an IPv4
/// address mapped into IPv6 is that IPv4 address, and an IPv6 address is its /64 (what one
/// host is usually given, and can pick addresses from at will).
fn peer_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) if v4.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => peer_of(IpAddr::V4(v4)),
            None if v6.is_loopback() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn loopback_is_one_peer_and_ipv6_counts_by_its_64() {
        for local in ["127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "::ffff:127.0.0.1"] {
            assert_eq!(peer_of(ip(local)), ip("127.0.0.1"), "{local}");
        }
        assert_eq!(peer_of(ip("192.168.1.7")), ip("192.168.1.7"));
        assert_eq!(peer_of(ip("::ffff:192.168.1.7")), ip("192.168.1.7"));
        assert_eq!(peer_of(ip("2001:db8:1:2:aaaa::1")), peer_of(ip("2001:db8:1:2:ffff::9")));
        assert_ne!(peer_of(ip("2001:db8:1:2::1")), peer_of(ip("2001:db8:1:3::1")));
    }

    #[test]
    fn a_peer_gets_its_cap_and_a_closed_slot_is_given_back() {
        let peers = Arc::new(Peers { cap: 2, open: Mutex::default() });
        let a = peers.enter(ip("127.0.0.1")).unwrap();
        let b = peers.enter(ip("127.0.0.2")).unwrap();
        assert!(peers.enter(ip("::1")).is_none(), "every loopback address is one peer");
        assert!(peers.enter(ip("10.0.0.1")).is_some(), "another peer has its own cap");
        drop(a);
        assert!(peers.enter(ip("127.0.0.1")).is_some());
        drop(b);
    }
}
