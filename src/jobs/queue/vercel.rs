//! [`VercelQueue`]: publishing and lease handling over the Vercel Queues REST API.

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use std::time::Duration;

use super::{Confirmation, JobMessage, Lease, PublishError, PublishFuture, Publisher, QueueApi, QueueFuture};
use crate::jobs::model::JOBS_TOPIC;

/// How long one call to the queue API may take (a send, a lease's confirmation, its
/// acknowledgement). The consumer's margin after its budget leaves room for the acknowledgement
/// (`settings::CONSUMER_DEFER_MARGIN_SECONDS`).
pub const QUEUE_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The consumer group Vercel derives from `api/queues/process-job.rs`, the one function whose
/// trigger consumes the jobs topic (`/` is `_S`, `.` is `_D`; see `vercel build`'s output).
pub const VERCEL_CONSUMER_GROUP: &str = "api_Squeues_Sprocess-job_Drs";

/// Vercel Queues over its REST API.
#[derive(Clone, Debug)]
pub struct VercelQueue {
    /// `https://{region}.vercel-queue.com` unless overridden (loopback test doubles).
    base_url: Option<String>,
    region: String,
    deployment_id: Option<String>,
    env_token: Option<String>,
}

impl VercelQueue {
    /// `region` defaults to `iad1`; `base_url` overrides the regional host.
    pub fn new(
        base_url: Option<String>,
        region: Option<String>,
        deployment_id: Option<String>,
        env_token: Option<String>,
    ) -> Self {
        Self { base_url, region: region.unwrap_or_else(|| "iad1".into()), deployment_id, env_token }
    }

    fn base(&self, region: Option<&str>) -> String {
        match &self.base_url {
            Some(base) => base.trim_end_matches('/').to_owned(),
            None => format!("https://{}.vercel-queue.com", region.unwrap_or(&self.region)),
        }
    }

    fn token<'a>(&'a self, request_token: Option<&'a str>) -> Result<&'a str, String> {
        request_token
            .or(self.env_token.as_deref())
            .ok_or_else(|| {
                "no Vercel OIDC token: no x-vercel-oidc-token naming this project (VERCEL_PROJECT_ID) and no VERCEL_OIDC_TOKEN"
                    .to_owned()
            })
    }
}

impl Publisher for VercelQueue {
    fn publish<'a>(&'a self, message: &'a JobMessage, oidc_token: Option<&'a str>) -> PublishFuture<'a> {
        Box::pin(async move { self.send_message(message, oidc_token).await.map_err(PublishError::Failed) })
    }
}

impl VercelQueue {
    async fn send_message(&self, message: &JobMessage, oidc_token: Option<&str>) -> Result<(), String> {
        let token = self.token(oidc_token)?;
        let request = self
            .request(Method::POST, format!("{}/api/v3/topic/{JOBS_TOPIC}", self.base(None)), token)
            .header("content-type", "application/json")
            .header("vqs-idempotency-key", &message.job_id);
        let body = message.body();
        let request = request.body(Full::new(Bytes::from(body))).map_err(|_| "invalid queue request".to_owned())?;
        let response = crate::outbound::send(request, QUEUE_CALL_TIMEOUT).await?;
        if response.status.is_success() {
            Ok(())
        } else {
            Err(format!("the queue refused the message (HTTP {})", response.status.as_u16()))
        }
    }
}

impl VercelQueue {
    /// A request to the queue API with what every one carries: the token, a `User-Agent`, and
    /// this deployment's id, which pins a message to the deployment that sent it and which a
    /// lease's calls repeat, as the platform's own client does (a receipt belongs to the
    /// deployment that received it).
    fn request(&self, method: Method, url: String, token: &str) -> http::request::Builder {
        let request = Request::builder()
            .method(method)
            .uri(url)
            .header("authorization", format!("Bearer {token}"))
            .header("user-agent", concat!("vercel-mcp/", env!("CARGO_PKG_VERSION")));
        match &self.deployment_id {
            Some(deployment) => request.header("vqs-deployment-id", deployment),
            None => request,
        }
    }

    /// Sets how long `lease`'s message stays invisible from now: extending it while the work
    /// runs, or shortening it when the work is left for the next delivery.
    async fn set_visibility(&self, lease: &Lease, visibility: Duration) -> Result<StatusCode, String> {
        let token = self.token(lease.oidc_token.as_deref())?;
        let body =
            serde_json::to_vec(&serde_json::json!({ "visibilityTimeoutSeconds": visibility.as_secs() })).expect("json");
        let request = self
            .request(Method::PATCH, self.lease_url(lease), token)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .map_err(|_| "invalid lease".to_owned())?;
        Ok(crate::outbound::send(request, QUEUE_CALL_TIMEOUT).await?.status)
    }

    fn lease_url(&self, lease: &Lease) -> String {
        format!(
            "{}/api/v3/topic/{}/consumer/{}/lease/{}",
            self.base(lease.region.as_deref()),
            lease.topic,
            lease.group,
            lease.receipt
        )
    }
}

impl QueueApi for VercelQueue {
    fn consumer_group(&self) -> &str {
        VERCEL_CONSUMER_GROUP
    }

    fn confirm<'a>(&'a self, lease: &'a Lease, visibility: Duration) -> QueueFuture<'a, Confirmation> {
        Box::pin(async move {
            match self.set_visibility(lease, visibility).await? {
                s if s.is_success() => Ok(Confirmation::Live),
                StatusCode::GONE => Ok(Confirmation::Redundant("already_processed")),
                StatusCode::CONFLICT => Ok(Confirmation::Redundant("not_available")),
                StatusCode::NOT_FOUND => Ok(Confirmation::Unknown),
                // This deployment's own token refused: a fault of ours, not of the delivery, and
                // the message must come back once it is fixed.
                s @ (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN) => {
                    Err(format!("the queue refused this deployment's token (HTTP {})", s.as_u16()))
                }
                s => Err(format!("the queue could not confirm the lease (HTTP {})", s.as_u16())),
            }
        })
    }

    fn resume_after<'a>(&'a self, lease: &'a Lease, after: Duration) -> QueueFuture<'a, ()> {
        Box::pin(async move {
            match self.set_visibility(lease, after).await? {
                s if s.is_success() => Ok(()),
                s => Err(format!("the queue did not reschedule the lease (HTTP {})", s.as_u16())),
            }
        })
    }

    fn ack<'a>(&'a self, lease: &'a Lease) -> QueueFuture<'a, ()> {
        Box::pin(async move {
            let token = self.token(lease.oidc_token.as_deref())?;
            // Retries included, an acknowledgement takes at most one call's time: the consumer's
            // margin after its budget holds one.
            let deadline = tokio::time::Instant::now() + QUEUE_CALL_TIMEOUT;
            let mut attempt = 0;
            loop {
                attempt += 1;
                let request = self
                    .request(Method::DELETE, self.lease_url(lease), token)
                    .body(Full::new(Bytes::new()))
                    .map_err(|_| "invalid lease".to_owned())?;
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                let response = crate::outbound::send(request, left).await?;
                match response.status {
                    // 404/409: the lease is already gone or was re-leased; the work is idempotent
                    // either way.
                    s if s.is_success() || s == StatusCode::NOT_FOUND || s == StatusCode::CONFLICT => return Ok(()),
                    // Throttled: come back when the queue says, if that leaves time for the call.
                    // A queue that keeps throttling is not pressed: a few tries, spaced.
                    StatusCode::TOO_MANY_REQUESTS => match retry_after(&response.headers) {
                        Some(wait)
                            if attempt < ACK_ATTEMPTS
                                && tokio::time::Instant::now() + wait.max(MIN_ACK_RETRY_WAIT) + MIN_ACK_CALL
                                    < deadline =>
                        {
                            tokio::time::sleep(wait.max(MIN_ACK_RETRY_WAIT)).await;
                        }
                        _ => return Err("the queue throttled the acknowledgement (HTTP 429)".to_owned()),
                    },
                    s => return Err(format!("the queue refused the acknowledgement (HTTP {})", s.as_u16())),
                }
            }
        })
    }
}

/// The least time worth giving an acknowledgement retried after a 429.
const MIN_ACK_CALL: Duration = Duration::from_millis(500);

/// The most tries an acknowledgement gets when it is throttled: the first and two retries.
pub const ACK_ATTEMPTS: u32 = 3;

/// The least wait between two tries, whatever `Retry-After` says (`0` included).
const MIN_ACK_RETRY_WAIT: Duration = Duration::from_millis(250);

/// A `Retry-After` in seconds (RFC 9110 §10.2.3). The HTTP-date form is not taken: the queue's
/// clock and ours need not agree, and a wait that cannot be read is not waited for.
fn retry_after(headers: &http::HeaderMap) -> Option<Duration> {
    let value = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    if value.is_empty() || value.len() > 4 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_read_in_whole_seconds_only() {
        let after = |value: &str| {
            let mut headers = http::HeaderMap::new();
            headers.insert(http::header::RETRY_AFTER, http::HeaderValue::from_str(value).unwrap());
            retry_after(&headers)
        };
        assert_eq!(after("0"), Some(Duration::ZERO));
        assert_eq!(after("2"), Some(Duration::from_secs(2)));
        for unreadable in ["", "-1", "1.5", " 2", "+2", "99999", "Wed, 21 Oct 2026 07:28:00 GMT"] {
            assert_eq!(after(unreadable), None, "{unreadable:?}");
        }
        assert_eq!(retry_after(&http::HeaderMap::new()), None);
    }
}
