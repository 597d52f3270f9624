//! The OpenTelemetry pipeline, built only when tracing is on: an OTLP/HTTP (protobuf) exporter
//! behind the SDK's batch processor, which exports from its own thread.

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};

use super::config::{Sampling, Settings};

/// The tracer provider exporting to `settings.endpoint`.
pub fn provider(settings: &Settings) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .build()?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(sampler(settings.sampling))
        .with_resource(resource)
        .build())
}

fn sampler(s: Sampling) -> Sampler {
    match s {
        Sampling::AlwaysOn => Sampler::AlwaysOn,
        Sampling::AlwaysOff => Sampler::AlwaysOff,
        Sampling::Ratio(r) => Sampler::TraceIdRatioBased(r),
        Sampling::ParentBasedAlwaysOn => Sampler::ParentBased(Box::new(Sampler::AlwaysOn)),
        Sampling::ParentBasedAlwaysOff => Sampler::ParentBased(Box::new(Sampler::AlwaysOff)),
        Sampling::ParentBasedRatio(r) => Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(r))),
    }
}
