//! The Vercel edge: adapts `vercel_runtime` requests to the transport and back.
//!
//! This is the only module that names `vercel_runtime`; everything behind it works on
//! `http::Request<Bytes>`, so it is testable without the runtime.

use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use std::sync::Arc;
use vercel_runtime::{Error, Request, Response, ResponseBody};

use crate::transport::{self, App};

/// Runs a Vercel Function that serves `app` (the body of `api/mcp.rs`).
pub async fn serve(app: Arc<App>) -> Result<(), Error> {
    vercel_runtime::run(vercel_runtime::service_fn(move |request: Request| {
        let app = app.clone();
        async move { Ok::<_, Error>(handle(&app, request).await) }
    }))
    .await
}

/// Buffers the body (bounded), runs the transport, and boxes the response body.
pub async fn handle(app: &Arc<App>, request: Request) -> Response<ResponseBody> {
    let (parts, body) = request.into_parts();
    let response = match transport::read_body(body, app.max_body_bytes()).await {
        Ok(bytes) => transport::handle(app, http::Request::from_parts(parts, bytes)).await,
        Err(response) => response,
    };
    response.map(|body| ResponseBody(BoxBody::new(body.map_err(|never| match never {}))))
}
