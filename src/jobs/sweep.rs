//! The cron sweep: `/api/cron/sweep-jobs`, run by Vercel Cron.
//!
//! Cron paths are public, so the sweep does nothing unless `Authorization: Bearer $CRON_SECRET`
//! matches, compared in constant time. Without a configured secret every call is refused, and
//! such refusals leave a `job.fault` line, one a minute at most (the path is public, so callers
//! other than the cron can make them): Vercel Cron does not report a 401, so without the line a
//! deployment missing `CRON_SECRET` would never sweep and nobody would know.

use bytes::Bytes;
use http::{Request, Response, StatusCode, header};
use serde_json::json;
use std::sync::Arc;

use super::store::JobStore;
use crate::body::Body;
use crate::security::constant_time_eq;
use crate::state::Clock;

/// The largest request body the sweep reads (413 past it): Vercel Cron sends none.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// What the sweep needs.
#[derive(Clone)]
pub struct Sweep {
    /// The job store.
    pub store: Arc<dyn JobStore>,
    /// Time source.
    pub clock: Arc<dyn Clock>,
    /// `CRON_SECRET`.
    pub secret: Option<String>,
    /// Where a sweep refused for want of a secret is reported.
    pub logger: Option<crate::observe::Logger>,
    /// Refusals for want of a secret, reported at most once per [`REPORT_EVERY_MS`].
    reports: Arc<crate::observe::Throttle>,
}

/// At most one `job.fault` line this often for sweeps refused for want of `CRON_SECRET`.
const REPORT_EVERY_MS: u64 = 60_000;

fn reply(status: StatusCode, body: serde_json::Value) -> Response<Body> {
    let mut response = Response::new(Body::full(serde_json::to_vec(&body).expect("json")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

impl Sweep {
    /// The sweep of `store`, refusing every call not bearing `secret` (all of them without one).
    pub fn new(store: Arc<dyn JobStore>, clock: Arc<dyn Clock>, secret: Option<String>) -> Self {
        Self { store, clock, secret, logger: None, reports: Arc::default() }
    }

    /// Reports sweeps refused for want of a secret through `logger`.
    pub fn with_logger(mut self, logger: crate::observe::Logger) -> Self {
        self.logger = Some(logger);
        self
    }

    /// Whether a refusal for want of a secret is to be reported now: the first, then one a
    /// minute at most, however many callers race.
    fn report_due(&self) -> bool {
        self.reports.due(self.clock.now_ms(), REPORT_EVERY_MS)
    }

    /// Serves one cron invocation.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<Body> {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        let authorized = match (&self.secret, presented) {
            (Some(secret), Some(presented)) => constant_time_eq(secret.as_bytes(), presented.as_bytes()),
            (Some(_), None) => false,
            (None, _) => {
                // The caller is told nothing it could use: the answer is the same 401.
                if let (Some(logger), true) = (&self.logger, self.report_due()) {
                    logger.fault("job.fault", "sweep", "CRON_SECRET is not set, so every sweep is refused");
                }
                false
            }
        };
        if !authorized {
            let mut response = reply(StatusCode::UNAUTHORIZED, json!({ "error": "unauthorized" }));
            response.headers_mut().insert(header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
            return response;
        }
        match self.store.sweep(self.clock.now_ms()).await {
            Ok(report) => {
                reply(StatusCode::OK, json!({ "evicted": report.evicted, "failedStuck": report.failed_stuck }))
            }
            Err(error) => reply(StatusCode::SERVICE_UNAVAILABLE, json!({ "error": error.message() })),
        }
    }
}
