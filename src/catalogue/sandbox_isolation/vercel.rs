//! The Vercel Sandbox REST API, as far as one run needs it: create a sandbox session, run one
//! command with its logs streamed back, stop the session.
//!
//! There is no Rust SDK; this follows the contract the official JavaScript SDK (3.x) speaks:
//! `POST /v2/sandboxes`, `POST /v2/sandboxes/sessions/{id}/cmd` with `wait` and `logs` (one
//! NDJSON stream: the command, its log lines, the command again with its exit code), and
//! `POST /v2/sandboxes/sessions/{id}/stop`, each with `?teamId=`. The
//! token is the deployment's OIDC token: the request's `x-vercel-oidc-token` when deployed,
//! `VERCEL_OIDC_TOKEN` (from `vercel env pull`) locally. Its unverified claims only address the
//! call (`owner_id` is the team, `project_id` the project); the API verifies the token itself.
//! The sandbox is always stopped, whatever happened after it was created.
//!
//! Wire mapping of [`SandboxCreateOptions`]: the pinned image `vercel/sandbox/node:22` is the
//! API's `runtime: "node22"`; the allowlist is `networkPolicy: {allow: [...]}`, which denies
//! every other destination; `persistent: false`; no `env` is ever sent.

use bytes::Bytes;
use http::{Method, Request};
use http_body_util::Full;
use serde_json::{Value, json};
use std::time::Duration;

use super::{
    RunSlot, SandboxClient, SandboxCreateOptions, SandboxError, SandboxFuture, SandboxRunRequest, SandboxRunResult,
};

/// Where the API lives unless configured otherwise.
pub const DEFAULT_BASE_URL: &str = "https://vercel.com/api";

/// How long creating or stopping may take; a run may take the sandbox's timeout plus this. The
/// worst case (5 + 35 + 5 s) stays inside the examples function's 60 s `maxDuration`.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// The Vercel Sandbox API client.
#[derive(Clone)]
pub struct VercelSandbox {
    base_url: String,
    env_token: Option<String>,
}

impl std::fmt::Debug for VercelSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VercelSandbox").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

/// Who the token says is calling.
struct Claims {
    team_id: String,
    project_id: String,
}

/// Reads `owner_id` and `project_id` from the token's payload without verifying it.
fn claims(token: &str) -> Option<Claims> {
    let payload = crate::security::platform::unverified_claims(token)?;
    Some(Claims {
        team_id: payload.get("owner_id")?.as_str()?.to_owned(),
        project_id: payload.get("project_id")?.as_str()?.to_owned(),
    })
}

fn failed(detail: impl Into<String>) -> SandboxError {
    SandboxError::Failed { detail: detail.into() }
}

/// The create body for `options` in `project_id`.
pub fn create_body(options: &SandboxCreateOptions, project_id: &str) -> Value {
    let runtime = options.image().rsplit('/').next().unwrap_or_default().replace(':', "");
    json!({
        "projectId": project_id,
        "runtime": runtime,
        "timeout": options.timeout_ms(),
        "resources": { "vcpus": options.vcpus() },
        "networkPolicy": { "allow": options.allowed_hosts() },
        "persistent": options.persistent(),
        "ports": [],
    })
}

/// The longest NDJSON line of a command stream read: the API sends a command's output in
/// pieces, each a line; a line past this is refused rather than held.
const MAX_LINE_BYTES: usize = 1024 * 1024;

/// A command's NDJSON stream, read as it arrives: its exit code, and its output kept up to what
/// the tool shows ([`KeptOutput`]), so a command that prints megabytes is still reported (capped,
/// with how much was cut) in bounded memory.
#[derive(Debug, Default)]
struct CommandStream {
    line: Vec<u8>,
    stdout: super::KeptOutput,
    stderr: super::KeptOutput,
    exit_code: Option<i32>,
}

impl CommandStream {
    /// Reads the stream's next bytes.
    fn push(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|&b| b == b'\n') {
            self.extend_line(&rest[..end])?;
            let line = std::mem::take(&mut self.line);
            self.read_line(&line)?;
            rest = &rest[end + 1..];
        }
        self.extend_line(rest)
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SandboxError> {
        if self.line.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(failed("an NDJSON line from the sandbox API is over 1 MiB"));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn read_line(&mut self, line: &[u8]) -> Result<(), SandboxError> {
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(());
        }
        let line: Value =
            serde_json::from_slice(line).map_err(|_| failed("malformed NDJSON line from the sandbox API"))?;
        if let Some(command) = line.get("command") {
            self.exit_code = command.get("exitCode").and_then(Value::as_i64).and_then(|c| i32::try_from(c).ok());
            return Ok(());
        }
        let data = line.get("data").and_then(Value::as_str).unwrap_or_default();
        match line.get("stream").and_then(Value::as_str) {
            Some("stdout") => self.stdout.push(data),
            Some("stderr") => self.stderr.push(data),
            _ => return Err(failed("the command stream reported an error")),
        }
        Ok(())
    }

    /// The run, once the stream has ended.
    fn finish(mut self) -> Result<SandboxRunResult, SandboxError> {
        let last = std::mem::take(&mut self.line);
        self.read_line(&last)?;
        Ok(SandboxRunResult {
            exit_code: self.exit_code.ok_or_else(|| failed("the command did not finish"))?,
            stdout: self.stdout.text,
            stderr: self.stderr.text,
            stdout_dropped: self.stdout.dropped,
            stderr_dropped: self.stderr.dropped,
        })
    }
}

impl VercelSandbox {
    /// A client of `base_url` (default [`DEFAULT_BASE_URL`]) with `env_token` as the fallback
    /// credential for the local run.
    pub fn new(base_url: Option<String>, env_token: Option<String>) -> Self {
        Self {
            base_url: base_url.unwrap_or_else(|| DEFAULT_BASE_URL.into()).trim_end_matches('/').to_owned(),
            env_token,
        }
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        token: &str,
        team_id: &str,
        body: Option<Value>,
    ) -> Result<Request<Full<Bytes>>, SandboxError> {
        let team: String = url::form_urlencoded::byte_serialize(team_id.as_bytes()).collect();
        Request::builder()
            .method(method)
            .uri(format!("{}{path}?teamId={team}", self.base_url))
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(Full::new(body.map_or_else(Bytes::new, |b| Bytes::from(b.to_string()))))
            .map_err(|_| failed("invalid sandbox API request"))
    }

    /// Sends `request` (to `path`) and reads its whole answer, within `timeout`.
    async fn call(&self, path: &str, request: Request<Full<Bytes>>, timeout: Duration) -> Result<Bytes, SandboxError> {
        let response = crate::outbound::send(request, timeout).await.map_err(|e| failed(format!("{path}: {e}")))?;
        if !response.status.is_success() {
            return Err(failed(format!("{path}: HTTP {}", response.status.as_u16())));
        }
        Ok(response.body)
    }

    async fn run_in(
        &self,
        session_id: &str,
        request: &SandboxRunRequest,
        token: &str,
        team_id: &str,
    ) -> Result<SandboxRunResult, SandboxError> {
        let command = json!({
            "command": "sh", "args": ["-c", request.command], "env": {}, "sudo": false, "wait": true, "logs": true,
        });
        let run_timeout = Duration::from_millis(request.options.timeout_ms()) + CALL_TIMEOUT;
        let ends = tokio::time::Instant::now() + run_timeout;
        let path = format!("/v2/sandboxes/sessions/{session_id}/cmd");
        let request = self.request(Method::POST, &path, token, team_id, Some(command))?;
        let response = crate::outbound::open(request, run_timeout).await.map_err(|e| failed(format!("{path}: {e}")))?;
        if !response.status().is_success() {
            return Err(failed(format!("{path}: HTTP {}", response.status().as_u16())));
        }
        // Read as it arrives, not collected: the stream carries all of the command's output.
        let mut body = response.into_body();
        let mut stream = CommandStream::default();
        loop {
            let left = ends.saturating_duration_since(tokio::time::Instant::now());
            let frame = tokio::time::timeout(left, http_body_util::BodyExt::frame(&mut body))
                .await
                .map_err(|_| failed(format!("{path}: timed out")))?;
            let Some(frame) = frame else { break };
            let frame = frame.map_err(|_| failed(format!("{path}: the stream broke")))?;
            if let Some(data) = frame.data_ref() {
                stream.push(data)?;
            }
        }
        stream.finish()
    }
}

impl VercelSandbox {
    /// Creates a sandbox session: its id, checked to be a plain path segment.
    async fn create(&self, token: &str, team_id: &str, body: Value) -> Result<String, SandboxError> {
        let path = "/v2/sandboxes";
        let created =
            self.call(path, self.request(Method::POST, path, token, team_id, Some(body))?, CALL_TIMEOUT).await?;
        let created: Value = serde_json::from_slice(&created).map_err(|_| failed("malformed create response"))?;
        Ok(created
            .pointer("/session/id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
            .ok_or_else(|| failed("no usable session id in the create response"))?
            .to_owned())
    }

    /// Stops the session `session_id`.
    async fn stop(&self, session_id: &str, token: &str, team_id: &str) -> Result<(), SandboxError> {
        let path = format!("/v2/sandboxes/sessions/{session_id}/stop");
        self.call(&path, self.request(Method::POST, &path, token, team_id, None)?, CALL_TIMEOUT).await.map(|_| ())
    }
}

impl SandboxClient for VercelSandbox {
    fn run<'a>(
        &'a self,
        request: &'a SandboxRunRequest,
        oidc_token: Option<&'a str>,
        slot: RunSlot,
    ) -> SandboxFuture<'a> {
        Box::pin(async move {
            let token = oidc_token.or(self.env_token.as_deref()).ok_or(SandboxError::NoCredential)?;
            let Claims { team_id, project_id } =
                claims(token).ok_or_else(|| failed("the OIDC token carries no owner_id/project_id claims"))?;
            let body = create_body(&request.options, &project_id);
            // The create runs past the request: a caller that leaves while it is in flight
            // would otherwise leave a sandbox that nothing stops. Created for nobody, it is
            // stopped at once. The slot goes with the sandbox: to the run if it is still there,
            // else it is freed once the stop has answered.
            let (created_tx, created) = tokio::sync::oneshot::channel();
            let (client, owned_token, owned_team) = (self.clone(), token.to_owned(), team_id.clone());
            crate::state::background::spawn(async move {
                match client.create(&owned_token, &owned_team, body).await {
                    // Armed here: wherever it is dropped before the run's own stop has answered
                    // (a send nobody receives, a channel dropped with it in it), it stops the
                    // sandbox, and frees the slot after.
                    Ok(session_id) => {
                        let guard = StopOnDrop(Some(Stop {
                            client,
                            session_id,
                            token: owned_token,
                            team_id: owned_team,
                            slot,
                        }));
                        let _ = created_tx.send(Ok(guard));
                    }
                    Err(error) => {
                        drop(slot);
                        let _ = created_tx.send(Err(error));
                    }
                }
            });
            let mut guard = created.await.map_err(|_| failed("the create ended without an answer"))??;
            let stop = guard.0.as_ref().expect("armed");
            let outcome = self.run_in(&stop.session_id, request, token, &stop.team_id).await;
            let stopped = self.stop(&stop.session_id, token, &stop.team_id).await;
            // Stopped: disarmed, and the slot freed with it.
            guard.0 = None;
            match (outcome, stopped) {
                (Err(error), _) => Err(error),
                (Ok(_), Err(error)) => Err(error),
                (Ok(result), Ok(_)) => Ok(result),
            }
        })
    }
}

/// What stopping a session takes, and the run's slot, held until the stop has answered.
struct Stop {
    client: VercelSandbox,
    session_id: String,
    token: String,
    team_id: String,
    slot: RunSlot,
}

/// Stops a session whose run was dropped before it could stop it (the client went away, and the
/// call's future with it): the microVM would otherwise run, and bill, until its own timeout. The
/// stop runs past the request, as the request's own work would (`background::spawn`), and keeps
/// the run's slot until it has answered.
struct StopOnDrop(Option<Stop>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        let Some(Stop { client, session_id, token, team_id, slot }) = self.0.take() else { return };
        if tokio::runtime::Handle::try_current().is_ok() {
            crate::state::background::spawn(async move {
                let _ = client.stop(&session_id, &token, &team_id).await;
                drop(slot);
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;

    fn token(payload: &Value) -> String {
        format!("eyJhbGciOiJSUzI1NiJ9.{}.c2ln", URL_SAFE_NO_PAD.encode(payload.to_string()))
    }

    #[test]
    fn claims_address_the_call() {
        let claims = claims(&token(&json!({"owner_id": "team_1", "project_id": "prj_2"}))).unwrap();
        assert_eq!((claims.team_id.as_str(), claims.project_id.as_str()), ("team_1", "prj_2"));
        assert!(super::claims(&token(&json!({"owner_id": "team_1"}))).is_none());
        assert!(super::claims("not-a-jwt").is_none());
        assert!(super::claims("a.b.c.d").is_none());
    }

    #[test]
    fn the_wire_body_pins_runtime_and_denies_other_egress() {
        let body = create_body(&super::super::build_sandbox_create_options(), "prj_2");
        assert_eq!(
            body,
            json!({
                "projectId": "prj_2",
                "runtime": "node22",
                "timeout": 30000,
                "resources": {"vcpus": 1},
                "networkPolicy": {"allow": ["registry.npmjs.org", "api.example.com"]},
                "persistent": false,
                "ports": [],
            })
        );
    }

    /// Lines split anywhere across pieces are read whole; blank lines are skipped; a line that is
    /// not JSON, an error line, a stream without its exit code and a line over the bound fail
    /// the run; output past what is kept is counted, not held.
    #[test]
    fn a_command_stream_is_read_in_pieces_and_bounded() {
        let text = concat!(
            "{\"command\":{\"exitCode\":null}}\n\n",
            "{\"stream\":\"stdout\",\"data\":\"hé\"}\n",
            "{\"stream\":\"stderr\",\"data\":\"w\\u0007arn\"}\n",
            "{\"command\":{\"exitCode\":3}}"
        )
        .as_bytes();
        for cut in 0..text.len() {
            let mut stream = CommandStream::default();
            stream.push(&text[..cut]).unwrap();
            stream.push(&text[cut..]).unwrap();
            let result = stream.finish().unwrap();
            assert_eq!((result.exit_code, result.stdout.as_str(), result.stderr.as_str()), (3, "hé", "warn"), "{cut}");
        }
        let fails = |text: &[u8]| {
            let mut stream = CommandStream::default();
            stream.push(text).and_then(|()| stream.finish()).is_err()
        };
        assert!(fails(b"{\"command\":{\"exitCode\":0}}\nnot json\n"));
        assert!(fails(b"{\"stream\":\"error\",\"data\":{}}\n{\"command\":{\"exitCode\":0}}\n"));
        assert!(fails(b"{\"stream\":\"stdout\",\"data\":\"x\"}\n"), "no exit code");
        assert!(fails(&vec![b' '; MAX_LINE_BYTES + 1]), "a line over the bound");

        let mut stream = CommandStream::default();
        let piece = format!("{}\n", json!({"stream": "stdout", "data": "x".repeat(1000)}));
        for _ in 0..3000 {
            stream.push(piece.as_bytes()).unwrap();
        }
        stream.push(b"{\"command\":{\"exitCode\":0}}\n").unwrap();
        let result = stream.finish().unwrap();
        assert_eq!(result.stdout.len(), super::super::MAX_OUTPUT_CHARS, "only what is shown is kept");
        assert_eq!(result.stdout_dropped, 3_000_000 - super::super::MAX_OUTPUT_CHARS);
    }
}
