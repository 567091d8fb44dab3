//! The local run: one process that routes every path of the project to the same handlers the
//! Vercel Functions call, on 127.0.0.1 only.
//!
//! Each connection is served by hyper with `TCP_NODELAY` (SSE frames must not wait on delayed
//! ACKs). Routing is a plain match on the path: the project has a handful of routes and they
//! mirror `api/`.

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;

use crate::config::Config;
use crate::transport::{self, App, Body};

/// The routes of the project, each backed by the app its Vercel Function would build.
#[derive(Clone)]
pub struct Routes {
    mcp: Arc<App>,
}

impl Routes {
    /// Builds every route from one configuration.
    pub fn new(config: &Config) -> Self {
        Self { mcp: crate::mcp_app(config) }
    }

    /// Routes with an explicit MCP app (tests and the conformance fixture).
    pub fn with_mcp(mcp: Arc<App>) -> Self {
        Self { mcp }
    }

    /// Serves one buffered request.
    pub async fn route(&self, request: Request<Bytes>) -> Response<Body> {
        match request.uri().path() {
            "/api/mcp" | "/api/mcp/" => transport::handle(&self.mcp, request).await,
            _ => {
                let mut response = Response::new(Body::full(Bytes::from_static(b"Not Found")));
                *response.status_mut() = StatusCode::NOT_FOUND;
                response
            }
        }
    }

    async fn route_incoming(&self, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        match transport::read_body(body, self.mcp.max_body_bytes()).await {
            Ok(bytes) => self.route(Request::from_parts(parts, bytes)).await,
            Err(response) => response,
        }
    }
}

/// `PORT`, defaulting to 3000.
pub fn port_from_env() -> u16 {
    std::env::var("PORT").ok().and_then(|p| p.parse().ok()).unwrap_or(3000)
}

/// Binds 127.0.0.1:`port` (0 picks a free port) and serves until the process ends.
pub async fn serve(routes: Routes, port: u16) -> std::io::Result<()> {
    let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    let addr = listener.local_addr()?;
    println!("MCP server listening on http://{addr}/api/mcp");
    serve_listener(routes, listener).await
}

/// Serves on an already bound listener (tests bind port 0 and read the address first).
pub async fn serve_listener(routes: Routes, listener: TcpListener) -> std::io::Result<()> {
    loop {
        let (stream, _) = listener.accept().await?;
        let _ = stream.set_nodelay(true);
        let routes = routes.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let routes = routes.clone();
                async move { Ok::<_, std::convert::Infallible>(routes.route_incoming(request).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
