//! Every integration test, in one binary: each module was once its own `tests/*.rs`, and each
//! of those linked the whole dependency tree (tokio, hyper, rustls, redis, tokio-postgres) again.
//! One binary links it once. `common` is the shared harness (servers, tokens, Redis, upstreams).

mod common;

mod auth;
mod client;
mod db_adapter;
mod descriptions;
mod documented;
mod elicitation;
mod examples;
mod facade;
mod faults;
mod fuzz_regressions;
mod hostile_input;
mod http_pipeline;
mod jobs;
mod layers;
mod least_privilege;
mod legacy;
mod multi_instance;
mod observability;
mod properties;
mod query_command;
mod redis_store;
mod redis_streams;
mod redis_tls;
mod sampling;
mod sandbox_isolation;
mod secure_tools;
mod shutdown;
mod stream_instances;
mod tasks;
mod telemetry;
mod vercel_config;
mod vercel_ipc;
