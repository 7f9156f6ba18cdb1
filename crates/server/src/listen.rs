//! The accept loop, with the limits a server on a desktop needs against slow or hostile
//! clients: at most `max_connections` at once (the rest wait in the kernel's backlog), a
//! connection that does not send its request head in `header_timeout` (a slowloris, or an
//! idle keep-alive) is closed, and a body that stalls for `body_timeout` is refused.

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_connections: 256, header_timeout: Duration::from_secs(10), body_timeout: Duration::from_secs(30) }
    }
}

/// Serve `app` on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits, shutdown: impl Future<Output = ()>) {
    let app = app.layer(tower_http::timeout::RequestBodyTimeoutLayer::new(limits.body_timeout));
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            () = &mut shutdown => return,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait, do not spin or stop.
                    tracing::warn!("accepting a connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            () = &mut shutdown => return,
        };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let mut http = hyper::server::conn::http1::Builder::new();
            http.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
                tracing::debug!("connection closed: {e}");
            }
            drop(permit);
        });
    }
}
