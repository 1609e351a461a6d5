//! The live dashboard of `lazarus run --dashboard HOST:PORT` (and `lazarus demo
//! --dashboard`): a web page served by the launcher that draws the run as it goes, from
//! the run's [`Timeline`].
//!
//! | path | what |
//! |---|---|
//! | `/` | the page (one file, no outside scripts: it works on a cluster's closed network) |
//! | `/events` | server-sent events: every event so far, then each new one as JSON |
//! | `/events.json` | every event so far, one JSON array (for scripts) |
//! | `/trace.json` | the Chrome/Perfetto trace of the events so far |
//!
//! The server runs on a thread of its own with a one-thread runtime: a slow browser never
//! holds up the supervision of the nodes (a reader that falls behind by more than the
//! timeline's backlog is told to reload).

use crate::timeline::{trace, Timeline};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::sync::broadcast::error::RecvError;

/// The page: markup, style and script in one file.
const PAGE: &str = include_str!("page.html");

/// A running dashboard server.
pub struct Dashboard {
    addr: SocketAddr,
}

impl Dashboard {
    /// Binds `addr` now (so that a taken port is an error before the run starts) and
    /// serves `timeline` from a thread of its own until the process exits.
    pub fn start(addr: SocketAddr, timeline: Arc<Timeline>) -> std::io::Result<Self> {
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        std::thread::Builder::new()
            .name("lazarus-dashboard".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            tracing::error!("the dashboard cannot listen: {e}");
                            return;
                        }
                    };
                    if let Err(e) = axum::serve(listener, router(timeline)).await {
                        tracing::error!("the dashboard stopped: {e}");
                    }
                })
            })?;
        Ok(Dashboard { addr })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

fn router(timeline: Arc<Timeline>) -> Router {
    let live = Arc::clone(&timeline);
    let all = Arc::clone(&timeline);
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/events", get(move || events(Arc::clone(&live))))
        .route(
            "/events.json",
            get(move || async move { Json(all.events()).into_response() }),
        )
        .route(
            "/trace.json",
            get(move || async move { Json(trace::chrome_trace(&timeline.events())) }),
        )
}

/// Every event so far, then each new one; `reload` if this reader fell too far behind.
async fn events(
    timeline: Arc<Timeline>,
) -> Sse<impl futures::Stream<Item = Result<Event, Infallible>>> {
    let (past, rx) = timeline.subscribe();
    let past = futures::stream::iter(
        past.into_iter()
            .map(|json| Ok(Event::default().data(&*json))),
    );
    let live = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(json) => Some((Ok(Event::default().data(&*json)), rx)),
            Err(RecvError::Lagged(_)) => {
                Some((Ok(Event::default().event("reload").data("behind")), rx))
            }
            Err(RecvError::Closed) => None,
        }
    });
    Sse::new(past.chain(live)).keep_alive(KeepAlive::default())
}
