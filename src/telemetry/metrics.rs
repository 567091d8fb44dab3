//! Metrics, aggregated in the process and exported with the spans as OTLP (cumulative, as
//! protobuf): request duration by method and outcome (its count is the request count), tool-call
//! duration by tool, job submissions, job deliveries by how they ended, and queue lag.
//!
//! Aggregated here rather than through the SDK's meter provider: its readers export from a
//! thread of their own on a schedule, which a serverless instance (frozen between requests)
//! does not suit; these are exported by the same flush as the spans.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
    metric, number_data_point,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

/// Request duration, seconds; its count is the request count.
pub const OPERATION_DURATION: &str = "mcp.server.operation.duration";
/// A tool handler's duration, seconds.
pub const TOOL_DURATION: &str = "mcp.tool.call.duration";
/// Jobs submitted (`mcp.job.result`: accepted or refused).
pub const JOBS_SUBMITTED: &str = "mcp.jobs.submitted";
/// Job deliveries, by how they ended (`mcp.job.outcome`).
pub const JOB_DELIVERIES: &str = "mcp.jobs.deliveries";
/// From a job's submission to its first delivery, seconds.
pub const QUEUE_LAG: &str = "mcp.jobs.queue.lag";

/// Histogram bucket bounds, seconds: from half a millisecond to a minute.
const BOUNDS: [f64; 15] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0];

/// Attributes of one series, in a fixed order (values are mostly fixed words, hence `Cow`).
pub type Series = Vec<(&'static str, std::borrow::Cow<'static, str>)>;

#[derive(Clone, Default)]
struct Distribution {
    count: u64,
    sum: f64,
    min: f64,
    max: f64,
    buckets: [u64; BOUNDS.len() + 1],
}

/// Every series since the process started.
#[derive(Default)]
pub(super) struct Registry {
    histograms: Mutex<BTreeMap<(&'static str, Series), Distribution>>,
    counters: Mutex<BTreeMap<(&'static str, Series), u64>>,
}

impl Registry {
    pub(super) fn record(&self, name: &'static str, series: Series, value: Duration) {
        let seconds = value.as_secs_f64();
        let mut histograms = self.histograms.lock().expect("metrics");
        let key = (name, series);
        // A series is new once; every later value finds it without moving the key in.
        let entry = match histograms.get_mut(&key) {
            Some(entry) => entry,
            None => histograms.entry(key).or_default(),
        };
        if entry.count == 0 || seconds < entry.min {
            entry.min = seconds;
        }
        entry.max = entry.max.max(seconds);
        entry.count += 1;
        entry.sum += seconds;
        let bucket = BOUNDS.iter().position(|bound| seconds <= *bound).unwrap_or(BOUNDS.len());
        entry.buckets[bucket] += 1;
    }

    pub(super) fn add(&self, name: &'static str, series: Series, n: u64) {
        *self.counters.lock().expect("metrics").entry((name, series)).or_default() += n;
    }

    /// Everything so far, as one OTLP export (cumulative since `start_ns`) from `resource` (the
    /// attributes the spans' exports carry too), or `None` if nothing was recorded yet.
    pub(super) fn export(
        &self,
        resource: &[KeyValue],
        start_ns: u64,
        now_ns: u64,
    ) -> Option<ExportMetricsServiceRequest> {
        let attributes = |series: &Series| -> Vec<KeyValue> {
            series
                .iter()
                .map(|(key, value)| KeyValue {
                    key: (*key).to_owned(),
                    value: Some(AnyValue { value: Some(any_value::Value::StringValue(value.to_string())) }),
                    ..Default::default()
                })
                .collect()
        };
        let mut metrics: BTreeMap<&'static str, Metric> = BTreeMap::new();
        for ((name, series), d) in self.histograms.lock().expect("metrics").iter() {
            let point = HistogramDataPoint {
                attributes: attributes(series),
                start_time_unix_nano: start_ns,
                time_unix_nano: now_ns,
                count: d.count,
                sum: Some(d.sum),
                bucket_counts: d.buckets.to_vec(),
                explicit_bounds: BOUNDS.to_vec(),
                min: Some(d.min),
                max: Some(d.max),
                ..Default::default()
            };
            let metric = metrics.entry(name).or_insert_with(|| Metric {
                name: (*name).to_owned(),
                unit: "s".to_owned(),
                data: Some(metric::Data::Histogram(Histogram {
                    data_points: Vec::new(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                })),
                ..Default::default()
            });
            if let Some(metric::Data::Histogram(histogram)) = &mut metric.data {
                histogram.data_points.push(point);
            }
        }
        for ((name, series), n) in self.counters.lock().expect("metrics").iter() {
            let point = NumberDataPoint {
                attributes: attributes(series),
                start_time_unix_nano: start_ns,
                time_unix_nano: now_ns,
                value: Some(number_data_point::Value::AsInt(*n as i64)),
                ..Default::default()
            };
            let metric = metrics.entry(name).or_insert_with(|| Metric {
                name: (*name).to_owned(),
                unit: "1".to_owned(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: Vec::new(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })),
                ..Default::default()
            });
            if let Some(metric::Data::Sum(sum)) = &mut metric.data {
                sum.data_points.push(point);
            }
        }
        if metrics.is_empty() {
            return None;
        }
        Some(ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                resource: Some(Resource { attributes: resource.to_vec(), ..Default::default() }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope { name: "vercel-mcp".to_owned(), ..Default::default() }),
                    metrics: metrics.into_values().collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_bucket_and_counters_add_per_series() {
        let registry = Registry::default();
        assert!(registry.export(&[], 1, 2).is_none(), "nothing recorded, nothing to send");
        // A value owned or borrowed is the same series.
        let owned = vec![("mcp.method.name", std::borrow::Cow::Owned("tools/call".to_owned()))];
        registry.record(OPERATION_DURATION, owned, Duration::from_micros(300));
        registry.record(OPERATION_DURATION, vec![("mcp.method.name", "tools/call".into())], Duration::from_millis(30));
        registry.add(JOBS_SUBMITTED, vec![("mcp.job.result", "accepted".into())], 2);
        let export = registry.export(&[], 10, 20).unwrap();
        let metrics = &export.resource_metrics[0].scope_metrics[0].metrics;
        let Some(metric::Data::Histogram(h)) = &metrics.iter().find(|m| m.name == OPERATION_DURATION).unwrap().data
        else {
            panic!()
        };
        assert_eq!(h.data_points.len(), 1, "one series");
        let point = &h.data_points[0];
        assert_eq!((point.count, point.start_time_unix_nano, point.time_unix_nano), (2, 10, 20));
        assert_eq!(point.bucket_counts[0], 1, "300 µs is under the first bound");
        assert_eq!(point.bucket_counts[6], 1, "30 ms is under 50 ms");
        assert_eq!((point.min, point.max), (Some(0.0003), Some(0.03)));
        let Some(metric::Data::Sum(s)) = &metrics.iter().find(|m| m.name == JOBS_SUBMITTED).unwrap().data else {
            panic!()
        };
        assert!(s.is_monotonic);
        assert_eq!(s.data_points[0].value, Some(number_data_point::Value::AsInt(2)));
    }
}
