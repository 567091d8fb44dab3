//! The least a JSON-RPC server can do with typed messages: `floor_json.rs` without the `Value`.
//! The body is read into borrowed structs that keep only the `id` and the echo argument (every
//! other member is skipped as it is parsed), and the answer is written from structs. No header
//! checks, no validation, no log line, no dispatch. Its cost beyond the floor is about the least a
//! server pays to parse its requests at all; the MCP server reads the message typed too, but its
//! `arguments` and `_meta` into values, and does its own work besides.

#[path = "support/floors.rs"]
mod floors;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    floors::serve("floor_typed", |body: Option<http_body_util::Collected<Bytes>>| async move {
        let body = body.map(|body| body.to_bytes()).unwrap_or_default();
        match serde_json::from_slice::<Call>(&body) {
            Ok(call) => (http::StatusCode::OK, echo(&call)),
            Err(_) => (http::StatusCode::BAD_REQUEST, Bytes::from_static(br#"{"error":"not a call"}"#)),
        }
    })
    .await
}

/// A `tools/call` as far as echo needs it.
#[derive(Deserialize)]
struct Call<'a> {
    #[serde(borrow)]
    id: Id<'a>,
    #[serde(borrow)]
    params: Params<'a>,
}

/// A JSON-RPC id: a number or a string, read by a visitor of its own (an untagged enum would
/// buffer the value first).
#[derive(Serialize)]
#[serde(untagged)]
enum Id<'a> {
    Number(i64),
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Id<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visitor<'a> {
            type Value = Id<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number or a string")
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Id<'a>, E> {
                Ok(Id::Number(n))
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Id<'a>, E> {
                i64::try_from(n).map(Id::Number).map_err(E::custom)
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, text: &'de str) -> Result<Id<'a>, E> {
                Ok(Id::Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Id<'a>, E> {
                Ok(Id::Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_any(Visitor(std::marker::PhantomData))
    }
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow)]
    arguments: Arguments<'a>,
}

#[derive(Deserialize)]
struct Arguments<'a> {
    #[serde(borrow)]
    message: Cow<'a, str>,
}

/// The echo tool's answer: the members of `floors::ECHO`, in the order the MCP server writes them.
#[derive(Serialize)]
struct Answer<'a> {
    jsonrpc: &'static str,
    id: &'a Id<'a>,
    result: EchoResult<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct EchoResult<'a> {
    content: [Text<'a>; 1],
    result_type: &'static str,
    #[serde(rename = "_meta")]
    meta: Meta,
}

#[derive(Serialize)]
struct Text<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    text: &'a str,
}

#[derive(Serialize)]
struct Meta {
    #[serde(rename = "io.modelcontextprotocol/serverInfo")]
    server_info: ServerInfo,
}

#[derive(Serialize)]
struct ServerInfo {
    name: &'static str,
    version: &'static str,
}

fn echo(call: &Call) -> Bytes {
    let answer = Answer {
        jsonrpc: "2.0",
        id: &call.id,
        result: EchoResult {
            content: [Text { kind: "text", text: &call.params.arguments.message }],
            result_type: "complete",
            meta: Meta { server_info: ServerInfo { name: "floor_typed", version: "1" } },
        },
    };
    Bytes::from(serde_json::to_vec(&answer).unwrap_or_default())
}
