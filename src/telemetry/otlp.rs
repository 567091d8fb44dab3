//! Finished spans as an OTLP/HTTP protobuf body (`ExportTraceServiceRequest`), written straight
//! from the SDK's `SpanData`.
//!
//! The OTLP exporter crate first converts every span into the generated message structs (a
//! `String` for every attribute key and value), measures them, encodes them and frees them:
//! ≈ 13 000 instructions a span here, more than the request the span describes. Writing the wire
//! format directly costs a small fraction of that; a unit test holds the bytes to what the
//! official conversion (`opentelemetry-proto`'s) decodes to, field for field.
//!
//! Field numbers are those of `opentelemetry/proto/{collector/trace,trace,common,resource}/v1`.

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{Array, InstrumentationScope, Key, KeyValue, StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SpanData;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};
use std::time::{SystemTime, UNIX_EPOCH};

/// The body of one export of `spans` from `resource`: one `ResourceSpans`, a `ScopeSpans` per
/// instrumentation scope (in the order the scopes first appear), the spans in their order.
pub(super) fn encode_traces(resource: &Resource, spans: &[SpanData]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(128 + 320 * spans.len());
    let mut scopes: Vec<&InstrumentationScope> = Vec::new();
    for span in spans {
        if !scopes.contains(&&span.instrumentation_scope) {
            scopes.push(&span.instrumentation_scope);
        }
    }
    // Every span of this crate comes from one tracer: no need to compare scopes span by span.
    let single_scope = scopes.len() == 1;
    // ExportTraceServiceRequest.resource_spans
    message(&mut buf, 1, |buf| {
        // ResourceSpans.resource: Resource.attributes
        message(buf, 1, |buf| {
            for (key, value) in resource.iter() {
                key_value(buf, 1, key, value);
            }
        });
        for scope in scopes {
            // ResourceSpans.scope_spans
            message(buf, 2, |buf| {
                // ScopeSpans.scope: name, version, attributes
                message(buf, 1, |buf| {
                    string(buf, 1, scope.name());
                    string(buf, 2, scope.version().unwrap_or_default());
                    for attribute in scope.attributes() {
                        key_value(buf, 3, &attribute.key, &attribute.value);
                    }
                });
                for span in spans.iter().filter(|span| single_scope || &span.instrumentation_scope == scope) {
                    message(buf, 2, |buf| encode_span(buf, span));
                }
                string(buf, 3, scope.schema_url().unwrap_or_default());
            });
        }
        string(buf, 3, resource.schema_url().unwrap_or_default());
    });
    buf
}

/// One `Span`.
fn encode_span(buf: &mut Vec<u8>, span: &SpanData) {
    let context = &span.span_context;
    bytes(buf, 1, &context.trace_id().to_bytes());
    bytes(buf, 2, &context.span_id().to_bytes());
    string(buf, 3, &context.trace_state().header());
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        bytes(buf, 4, &span.parent_span_id.to_bytes());
    }
    string(buf, 5, &span.name);
    let kind = match span.span_kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    };
    varint(buf, 6, kind);
    fixed64(buf, 7, nanos(span.start_time));
    fixed64(buf, 8, nanos(span.end_time));
    for attribute in &span.attributes {
        key_value(buf, 9, &attribute.key, &attribute.value);
    }
    varint(buf, 10, span.dropped_attributes_count.into());
    for event in span.events.iter() {
        message(buf, 11, |buf| {
            fixed64(buf, 1, nanos(event.timestamp));
            string(buf, 2, &event.name);
            attributes(buf, 3, &event.attributes);
            varint(buf, 4, event.dropped_attributes_count.into());
        });
    }
    varint(buf, 12, span.events.dropped_count.into());
    for link in span.links.iter() {
        message(buf, 13, |buf| {
            bytes(buf, 1, &link.span_context.trace_id().to_bytes());
            bytes(buf, 2, &link.span_context.span_id().to_bytes());
            string(buf, 3, &link.span_context.trace_state().header());
            attributes(buf, 4, &link.attributes);
            varint(buf, 5, link.dropped_attributes_count.into());
            fixed32(buf, 6, flags(link.span_context.is_remote(), link.span_context.trace_flags().to_u8()));
        });
    }
    varint(buf, 14, span.links.dropped_count.into());
    // The status is always present, as the official conversion writes it.
    message(buf, 15, |buf| {
        let (code, description) = match &span.status {
            Status::Unset => (0, ""),
            Status::Ok => (1, ""),
            Status::Error { description } => (2, description.as_ref()),
        };
        string(buf, 2, description);
        varint(buf, 3, code);
    });
    fixed32(buf, 16, flags(span.parent_span_is_remote, context.trace_flags().to_u8()));
}

/// `SpanFlags`: the W3C trace flags, and whether the parent (or the linked span) is remote.
fn flags(remote: bool, trace_flags: u8) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    u32::from(trace_flags) | HAS_IS_REMOTE | if remote { IS_REMOTE } else { 0 }
}

fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

fn attributes(buf: &mut Vec<u8>, tag: u32, attributes: &[KeyValue]) {
    for attribute in attributes {
        key_value(buf, tag, &attribute.key, &attribute.value);
    }
}

/// A `KeyValue` (key, `AnyValue`).
fn key_value(buf: &mut Vec<u8>, tag: u32, key: &Key, value: &Value) {
    message(buf, tag, |buf| {
        string(buf, 1, key.as_str());
        message(buf, 2, |buf| any_value(buf, value));
    });
}

/// The fields of an `AnyValue`: exactly one member of its `oneof`, written even when it holds
/// the default (presence is the point of a `oneof`).
fn any_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Bool(b) => {
            encode_key(2, WireType::Varint, buf);
            encode_varint(u64::from(*b), buf);
        }
        Value::I64(n) => {
            encode_key(3, WireType::Varint, buf);
            encode_varint(*n as u64, buf);
        }
        Value::F64(x) => {
            encode_key(4, WireType::SixtyFourBit, buf);
            buf.extend_from_slice(&x.to_bits().to_le_bytes());
        }
        Value::String(s) => present_string(buf, 1, s.as_str()),
        // ArrayValue.values
        Value::Array(array) => message(buf, 5, |buf| match array {
            Array::Bool(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::Bool(*v)))),
            Array::I64(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::I64(*v)))),
            Array::F64(values) => values.iter().for_each(|v| message(buf, 1, |buf| any_value(buf, &Value::F64(*v)))),
            Array::String(values) => {
                values.iter().for_each(|v: &StringValue| message(buf, 1, |buf| present_string(buf, 1, v.as_str())))
            }
            // A kind of array added to the API after this was written travels as its text.
            other => message(buf, 1, |buf| present_string(buf, 1, &other.to_string())),
        }),
        // Likewise a kind of value added after this was written.
        other => present_string(buf, 1, &other.as_str()),
    }
}

/// A length-delimited field written by `write`: the content goes in place after a one-byte
/// length, which is widened afterwards in the rare case the content is 128 bytes or more.
fn message(buf: &mut Vec<u8>, tag: u32, write: impl FnOnce(&mut Vec<u8>)) {
    encode_key(tag, WireType::LengthDelimited, buf);
    let at = buf.len();
    buf.push(0);
    write(buf);
    let len = buf.len() - at - 1;
    if len < 0x80 {
        buf[at] = len as u8;
    } else {
        let mut prefix = Vec::with_capacity(encoded_len_varint(len as u64));
        encode_varint(len as u64, &mut prefix);
        buf.splice(at..at + 1, prefix);
    }
}

/// A `string` field; proto3 leaves an empty one out.
fn string(buf: &mut Vec<u8>, tag: u32, value: &str) {
    if !value.is_empty() {
        present_string(buf, tag, value);
    }
}

/// A `string` written even when empty (a `oneof` member).
fn present_string(buf: &mut Vec<u8>, tag: u32, value: &str) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(value.len() as u64, buf);
    buf.extend_from_slice(value.as_bytes());
}

/// A `bytes` field; proto3 leaves an empty one out.
fn bytes(buf: &mut Vec<u8>, tag: u32, value: &[u8]) {
    if !value.is_empty() {
        encode_key(tag, WireType::LengthDelimited, buf);
        encode_varint(value.len() as u64, buf);
        buf.extend_from_slice(value);
    }
}

/// A varint scalar; proto3 leaves zero out.
fn varint(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(value, buf);
    }
}

fn fixed64(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

fn fixed32(buf: &mut Vec<u8>, tag: u32, value: u32) {
    if value != 0 {
        encode_key(tag, WireType::ThirtyTwoBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Link, SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
    use prost::Message;
    use std::time::Duration;

    fn context(trace: u128, span: u64, sampled: bool, remote: bool, state: &str) -> SpanContext {
        let flags = if sampled { TraceFlags::SAMPLED } else { TraceFlags::default() };
        let state = if state.is_empty() { TraceState::default() } else { state.parse().unwrap() };
        SpanContext::new(TraceId::from(trace), SpanId::from(span), flags, remote, state)
    }

    /// Spans covering every field and every kind of value, from two scopes.
    fn spans() -> Vec<SpanData> {
        let first = InstrumentationScope::builder("vercel-mcp").build();
        let second = InstrumentationScope::builder("a-fork")
            .with_version("1.2.3")
            .with_schema_url("https://opentelemetry.io/schemas/1.30.0")
            .with_attributes([KeyValue::new("scope.attr", true)])
            .build();
        let at = |ms: u64| UNIX_EPOCH + Duration::from_millis(1_800_000_000_000 + ms);
        let long_name = "x".repeat(300);
        let mut events = opentelemetry_sdk::trace::SpanEvents::default();
        events.events.push(opentelemetry::trace::Event::new("an event", at(3), vec![KeyValue::new("n", 7_i64)], 2));
        events.dropped_count = 1;
        let mut links = opentelemetry_sdk::trace::SpanLinks::default();
        let mut link = Link::with_context(context(9, 10, true, true, "vendor=link"));
        link.attributes = vec![KeyValue::new("why", "submitted by")];
        link.dropped_attributes_count = 1;
        links.links.push(link);
        links.dropped_count = 4;
        let server = SpanData {
            span_context: context(0x4bf92f3577b34da6a3ce929d0e0e4736, 0x00f067aa0ba902b7, true, false, "vendor=span"),
            parent_span_id: SpanId::from(0x1122334455667788),
            parent_span_is_remote: true,
            span_kind: SpanKind::Server,
            name: "tools/call echo".into(),
            start_time: at(0),
            end_time: at(5),
            attributes: vec![
                KeyValue::new("mcp.method.name", "tools/call"),
                KeyValue::new("http.response.status_code", 200_i64),
                KeyValue::new("negative", -3_i64),
                KeyValue::new("ratio", 0.25_f64),
                KeyValue::new("zero", 0_i64),
                KeyValue::new("no", false),
                KeyValue::new("empty", ""),
                KeyValue::new("long", long_name.clone()),
                KeyValue::new("bools", Value::Array(Array::Bool(vec![true, false]))),
                KeyValue::new("ints", Value::Array(Array::I64(vec![1, -1, 0]))),
                KeyValue::new("floats", Value::Array(Array::F64(vec![1.5, 0.0]))),
                KeyValue::new("strings", Value::Array(Array::String(vec!["a".into(), "".into()]))),
            ],
            dropped_attributes_count: 3,
            events,
            links,
            status: Status::error("tool_error"),
            instrumentation_scope: first.clone(),
        };
        let root = SpanData {
            span_context: context(5, 6, false, false, ""),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Consumer,
            name: long_name.into(),
            start_time: at(1),
            end_time: at(2),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Ok,
            instrumentation_scope: second,
        };
        let mut others: Vec<SpanData> = [SpanKind::Internal, SpanKind::Client, SpanKind::Producer]
            .into_iter()
            .enumerate()
            .map(|(i, kind)| SpanData {
                span_kind: kind,
                parent_span_is_remote: false,
                status: Status::Unset,
                instrumentation_scope: first.clone(),
                span_context: context(0x4bf92f3577b34da6a3ce929d0e0e4736, 100 + i as u64, true, false, ""),
                ..root.clone()
            })
            .collect();
        let mut all = vec![server, root];
        all.append(&mut others);
        all
    }

    #[test]
    fn decodes_to_what_the_official_conversion_builds() {
        let resource = Resource::builder_empty()
            .with_service_name("vercel-mcp")
            .with_attributes([KeyValue::new("deployment.environment.name", "test"), KeyValue::new("pid", 42_i64)])
            .with_schema_url([], "https://opentelemetry.io/schemas/1.30.0")
            .build();
        let spans = spans();
        let ours = ExportTraceServiceRequest::decode(encode_traces(&resource, &spans).as_slice()).unwrap();
        let official = ExportTraceServiceRequest {
            resource_spans: opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope(
                spans,
                &ResourceAttributesWithSchema::from(&resource),
            ),
        };
        assert_eq!(ours.resource_spans[0].scope_spans.len(), 2, "two scopes");
        assert_eq!(ours, official);
    }

    #[test]
    fn an_empty_batch_is_a_resource_without_spans() {
        let resource = Resource::builder_empty().with_service_name("s").build();
        let decoded = ExportTraceServiceRequest::decode(encode_traces(&resource, &[]).as_slice()).unwrap();
        assert_eq!(decoded.resource_spans.len(), 1);
        assert!(decoded.resource_spans[0].scope_spans.is_empty());
    }

    #[test]
    fn long_messages_get_a_wide_length() {
        let mut buf = Vec::new();
        message(&mut buf, 1, |buf| buf.extend(std::iter::repeat_n(7u8, 300)));
        assert_eq!(&buf[..3], &[0x0a, 0xac, 0x02], "tag 1, length 300 as a two-byte varint");
        assert_eq!(buf.len(), 303);
    }
}
