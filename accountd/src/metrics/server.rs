//! The HTTP server of `/metrics`: hyper's HTTP/1.1 on a one-thread tokio runtime of its own.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;

use super::CONTENT_TYPE;

/// What the server answers `GET /metrics` with.
pub type Body = Arc<dyn Fn() -> String + Send + Sync>;

/// The largest request head a connection may send (hyper's smallest read buffer limit); a
/// longer one is refused with 431.
pub const MAX_REQUEST_BYTES: usize = 8 * 1024;
/// How long a client may take to send a request head.
pub(crate) const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one connection may stay open, keep-alive included (a scraper reconnects).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
/// How often the accept loop looks at the stop flag; also the pause after a failed accept
/// (too many open files): the server waits and goes on.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// `GET /metrics` (and `HEAD`) on a listening socket, in a thread of its own. Connections are
/// tasks of the thread's runtime, so a client that connects and says nothing holds up no one;
/// each scrape is computed on a blocking thread, where a panic stays (the answer is 500).
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Connections being served now (at most [`MAX_CONNECTIONS`]).
    open: Arc<AtomicUsize>,
}

impl MetricsServer {
    /// Bind `listen` and serve until [`MetricsServer::stop`] (or drop).
    pub fn start(listen: SocketAddr, body: Body) -> std::io::Result<MetricsServer> {
        let listener = std::net::TcpListener::bind(listen)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let listener = {
            let _inside = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let open = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&open);
        let thread = std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                runtime.block_on(serve(listener, body, stopping, counted));
                // A scrape still computing is not waited for long.
                runtime.shutdown_timeout(Duration::from_secs(1));
            })?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
            open,
        })
    }

    /// Connections being served now.
    pub fn open_connections(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// The address bound (the port chosen when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The most connections served at once. Beyond them a new connection is closed as soon as
/// it is accepted: a local user who opens thousands and leaves them idle costs the daemon at
/// most this many descriptors, and governance keeps the rest (issue 25, finding 3).
pub const MAX_CONNECTIONS: usize = 64;

/// A connection being served; counted down when it ends.
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    body: Body,
    stop: Arc<AtomicBool>,
    open: Arc<AtomicUsize>,
) {
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(ACCEPT_POLL, listener.accept()).await {
            Err(_) => {} // nobody came: look at the stop flag again
            Ok(Ok((stream, _))) => {
                if open.fetch_add(1, Ordering::Relaxed) >= MAX_CONNECTIONS {
                    open.fetch_sub(1, Ordering::Relaxed);
                    drop(stream);
                    continue;
                }
                let guard = Open(Arc::clone(&open));
                let body = Arc::clone(&body);
                tokio::spawn(async move {
                    connection(stream, body).await;
                    drop(guard);
                });
            }
            Ok(Err(_)) => tokio::time::sleep(ACCEPT_POLL).await,
        }
    }
}

async fn connection(stream: tokio::net::TcpStream, body: Body) {
    let service = hyper::service::service_fn(move |request| answer(request, Arc::clone(&body)));
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        // One request per connection: an idle keep-alive connection would hold its slot (and
        // descriptor) for a minute; a scraper reconnects at each scrape.
        .keep_alive(false)
        .max_buf_size(MAX_REQUEST_BYTES)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    // Errors (a client gone, a malformed request hyper already answered) end this connection
    // only.
    let _ = tokio::time::timeout(CONNECTION_TIMEOUT, conn).await;
}

type Answer = hyper::Response<Full<Bytes>>;

fn response(status: u16, content_type: &str, text: String, extra: &[(&str, &str)]) -> Answer {
    let mut builder = hyper::Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, content_type);
    for (name, value) in extra {
        builder = builder.header(*name, *value);
    }
    // The status and headers are this file's constants; were one refused, the answer is an
    // empty 500 rather than a panic.
    builder
        .body(Full::new(Bytes::from(text)))
        .unwrap_or_else(|_| {
            let mut r = hyper::Response::new(Full::new(Bytes::new()));
            *r.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
            r
        })
}

const PLAIN: &str = "text/plain; charset=utf-8";

async fn answer(
    request: hyper::Request<hyper::body::Incoming>,
    body: Body,
) -> Result<Answer, std::convert::Infallible> {
    if request.uri().path() != "/metrics" {
        let text = "not found: the metrics are at /metrics\n".to_string();
        return Ok(response(404, PLAIN, text, &[]));
    }
    Ok(match *request.method() {
        // hyper sends no body for HEAD, with the same headers.
        hyper::Method::GET | hyper::Method::HEAD => {
            match tokio::task::spawn_blocking(move || body()).await {
                Ok(text) => response(200, CONTENT_TYPE, text, &[]),
                Err(_) => {
                    let text = "the metrics could not be computed; see accountd's log\n";
                    response(500, PLAIN, text.to_string(), &[])
                }
            }
        }
        _ => {
            let text = "only GET /metrics\n".to_string();
            response(405, PLAIN, text, &[("Allow", "GET, HEAD")])
        }
    })
}
