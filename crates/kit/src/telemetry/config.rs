//! Whether and where to send traces, from the process environment: the OpenTelemetry variables
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER`/`_ARG`, `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`) and, for installs
//! configured for the Go api-manager, `JAEGER_DISABLED`/`JAEGER_ENDPOINT` mapped to Jaeger's OTLP
//! receiver (docs/observability.md). Pure: the environment comes in as a lookup function.

use reqwest::Url;

use crate::go::parse_bool;

/// Every variable read here; the operator forwards those that are set to the api-manager it
/// renders, except `OTEL_SERVICE_NAME` (each process names itself).
pub const VARIABLES: [&str; 10] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_SERVICE_NAME",
    "OTEL_TRACES_SAMPLER",
    "OTEL_TRACES_SAMPLER_ARG",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
    "JAEGER_DISABLED",
    "JAEGER_ENDPOINT",
    "JAEGER_AGENT_HOST",
];

/// The Jaeger collector's Thrift-over-HTTP port (the Go api-manager's `JAEGER_ENDPOINT`).
pub const JAEGER_THRIFT_PORT: u16 = 14268;
/// The OTLP/HTTP port, which Jaeger (1.35 and later) also serves.
pub const OTLP_HTTP_PORT: u16 = 4318;
/// The OTLP/HTTP path of traces.
pub const TRACES_PATH: &str = "/v1/traces";

/// Why the tracing variables cannot be used. Tracing then stays off; the process runs on.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    /// An endpoint variable is not an http(s) URL.
    #[error(
        "{variable}={value:?} is not a usable endpoint ({reason}); set it to an http(s) URL such as \
         http://otel-collector:4318, or unset it"
    )]
    Endpoint {
        variable: &'static str,
        value: String,
        reason: String,
    },
}

/// Which spans to keep ([`Sampler`] of the SDK, chosen by `OTEL_TRACES_SAMPLER`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sampling {
    AlwaysOn,
    AlwaysOff,
    Ratio(f64),
    ParentBasedAlwaysOn,
    ParentBasedAlwaysOff,
    ParentBasedRatio(f64),
}

/// Tracing is on: where the spans go and how they are labelled.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The full OTLP/HTTP traces URL (`.../v1/traces`).
    pub endpoint: String,
    /// The variable the endpoint came from (logged at start-up).
    pub source: &'static str,
    pub service_name: String,
    pub sampling: Sampling,
    /// Things to tell the user (ignored or defaulted values).
    pub warnings: Vec<String>,
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// No tracing; with a note when a variable was set but does not turn it on.
    Off(Option<String>),
    On(Settings),
}

/// Reads the tracing variables through `env` (unset and empty count the same). `service` names
/// the process unless `OTEL_SERVICE_NAME` does.
pub fn from_env(env: impl Fn(&str) -> Option<String>, service: &str) -> Result<Decision, Error> {
    let var = |k: &str| env(k).map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(Decision::Off(None));
    }
    let mut warnings = Vec::new();
    match var("OTEL_TRACES_EXPORTER").as_deref() {
        Some("none") => return Ok(Decision::Off(None)),
        None | Some("otlp") => {}
        Some(other) => warnings.push(format!(
            "OTEL_TRACES_EXPORTER={other:?} is not supported; exporting with otlp (OTLP/HTTP)"
        )),
    }
    let jaeger_on = var("JAEGER_DISABLED").and_then(|v| parse_bool(&v)) == Some(false);
    let (endpoint, source) = if let Some(v) = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        (
            checked("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &v)?.to_string(),
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        )
    } else if let Some(v) = var("OTEL_EXPORTER_OTLP_ENDPOINT") {
        (
            with_traces_path(checked("OTEL_EXPORTER_OTLP_ENDPOINT", &v)?),
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        )
    } else if jaeger_on {
        match var("JAEGER_ENDPOINT") {
            Some(v) => (jaeger_to_otlp(checked("JAEGER_ENDPOINT", &v)?), "JAEGER_ENDPOINT"),
            None => {
                // The Go client then sent to its agent (JAEGER_AGENT_HOST, default localhost).
                let host = var("JAEGER_AGENT_HOST").unwrap_or_else(|| "localhost".into());
                let url = format!("http://{host}:{OTLP_HTTP_PORT}{TRACES_PATH}");
                (checked("JAEGER_AGENT_HOST", &url)?.to_string(), "JAEGER_AGENT_HOST")
            }
        }
    } else {
        let note = var("JAEGER_ENDPOINT").map(|_| {
            "JAEGER_ENDPOINT is set but JAEGER_DISABLED is not \"false\" (to trace, set \
             JAEGER_DISABLED=false or OTEL_EXPORTER_OTLP_ENDPOINT)"
                .to_string()
        });
        return Ok(Decision::Off(note));
    };
    if source.starts_with("OTEL") && jaeger_on {
        warnings.push(format!("both {source} and JAEGER_* are set; {source} is used"));
    }
    let sampling = sampling(
        var("OTEL_TRACES_SAMPLER"),
        var("OTEL_TRACES_SAMPLER_ARG"),
        &mut warnings,
    );
    Ok(Decision::On(Settings {
        endpoint,
        source,
        service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| service.to_string()),
        sampling,
        warnings,
    }))
}

/// `value` as an http(s) URL with a host.
fn checked(variable: &'static str, value: &str) -> Result<Url, Error> {
    let bad = |reason: String| Error::Endpoint {
        variable,
        value: value.to_string(),
        reason,
    };
    let url = Url::parse(value).map_err(|e| bad(e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad(format!("scheme {:?} is not http or https", url.scheme())));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host".into()));
    }
    Ok(url)
}

/// The OTLP rule for the generic endpoint: `/v1/traces` is appended to its path.
fn with_traces_path(mut url: Url) -> String {
    let path = format!("{}{TRACES_PATH}", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url.to_string()
}

/// Jaeger's collector takes OTLP/HTTP on port 4318 at `/v1/traces`: the same scheme and host;
/// the Thrift port 14268 becomes 4318, any other port (a proxy, a custom mapping) is kept; the
/// path becomes `/v1/traces`.
fn jaeger_to_otlp(mut url: Url) -> String {
    if url.port() == Some(JAEGER_THRIFT_PORT) {
        // Setting a port on an http(s) URL with a host cannot fail.
        let _ = url.set_port(Some(OTLP_HTTP_PORT));
    }
    url.set_path(TRACES_PATH);
    url.set_query(None);
    url.to_string()
}

/// The sampler of `OTEL_TRACES_SAMPLER` (default `parentbased_always_on`); unknown names and
/// bad ratios fall back with a warning.
fn sampling(name: Option<String>, arg: Option<String>, warnings: &mut Vec<String>) -> Sampling {
    let mut ratio = || match arg.as_deref().map(str::parse::<f64>) {
        Some(Ok(r)) if (0.0..=1.0).contains(&r) => r,
        None => 1.0,
        Some(_) => {
            warnings.push(format!(
                "OTEL_TRACES_SAMPLER_ARG={:?} is not a ratio between 0 and 1; using 1.0",
                arg.clone().unwrap_or_default()
            ));
            1.0
        }
    };
    match name.as_deref() {
        None | Some("parentbased_always_on") => Sampling::ParentBasedAlwaysOn,
        Some("always_on") => Sampling::AlwaysOn,
        Some("always_off") => Sampling::AlwaysOff,
        Some("traceidratio") => Sampling::Ratio(ratio()),
        Some("parentbased_always_off") => Sampling::ParentBasedAlwaysOff,
        Some("parentbased_traceidratio") => Sampling::ParentBasedRatio(ratio()),
        Some(other) => {
            warnings.push(format!(
                "OTEL_TRACES_SAMPLER={other:?} is not supported; using parentbased_always_on"
            ));
            Sampling::ParentBasedAlwaysOn
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn decide(vars: &[(&str, &str)]) -> Result<Decision, Error> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        from_env(
            |k| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()),
            "storageos-operator",
        )
    }

    fn on(vars: &[(&str, &str)]) -> Settings {
        match decide(vars) {
            Ok(Decision::On(s)) => s,
            other => panic!("{vars:?}: expected tracing on, got {other:?}"),
        }
    }

    #[test]
    fn nothing_set_is_off_without_a_note() {
        assert_eq!(decide(&[]), Ok(Decision::Off(None)));
        assert_eq!(
            decide(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "  ")]),
            Ok(Decision::Off(None))
        );
        assert_eq!(decide(&[("OTEL_SERVICE_NAME", "x")]), Ok(Decision::Off(None)));
    }

    #[test]
    fn generic_endpoint_gets_the_traces_path_and_the_signal_endpoint_is_kept() {
        let s = on(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        assert_eq!(s.endpoint, "http://collector:4318/v1/traces");
        assert_eq!(s.source, "OTEL_EXPORTER_OTLP_ENDPOINT");
        assert_eq!(s.service_name, "storageos-operator");
        assert_eq!(s.sampling, Sampling::ParentBasedAlwaysOn);
        assert!(s.warnings.is_empty());
        let s = on(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c.example/otlp/")]);
        assert_eq!(s.endpoint, "https://c.example/otlp/v1/traces");
        let s = on(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:9999/custom"),
            ("OTEL_SERVICE_NAME", "mine"),
        ]);
        assert_eq!(s.endpoint, "http://traces:9999/custom");
        assert_eq!(s.source, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        assert_eq!(s.service_name, "mine");
    }

    #[test]
    fn jaeger_variables_of_the_go_api_manager_map_to_jaegers_otlp_receiver() {
        let s = on(&[
            ("JAEGER_DISABLED", "false"),
            ("JAEGER_ENDPOINT", "http://jaeger-collector:14268/api/traces"),
        ]);
        assert_eq!(s.endpoint, "http://jaeger-collector:4318/v1/traces");
        assert_eq!(s.source, "JAEGER_ENDPOINT");
        // Another port is kept (a proxy); the path is OTLP's.
        let s = on(&[
            ("JAEGER_DISABLED", "0"),
            (
                "JAEGER_ENDPOINT",
                "https://traces.example:8443/api/traces?format=jaeger.thrift",
            ),
        ]);
        assert_eq!(s.endpoint, "https://traces.example:8443/v1/traces");
        // Enabled without an endpoint: the agent host, OTLP port.
        let s = on(&[("JAEGER_DISABLED", "false"), ("JAEGER_AGENT_HOST", "10.0.0.7")]);
        assert_eq!(s.endpoint, "http://10.0.0.7:4318/v1/traces");
        assert_eq!(
            on(&[("JAEGER_DISABLED", "False")]).endpoint,
            "http://localhost:4318/v1/traces"
        );
    }

    #[test]
    fn jaeger_endpoint_without_jaeger_disabled_false_stays_off_and_says_why() {
        for disabled in [None, Some("true"), Some("yes")] {
            let mut vars = vec![("JAEGER_ENDPOINT", "http://j:14268/api/traces")];
            vars.extend(disabled.map(|d| ("JAEGER_DISABLED", d)));
            match decide(&vars) {
                Ok(Decision::Off(Some(note))) => assert!(note.contains("JAEGER_DISABLED"), "{note}"),
                other => panic!("{vars:?}: {other:?}"),
            }
        }
        assert_eq!(decide(&[("JAEGER_DISABLED", "true")]), Ok(Decision::Off(None)));
    }

    #[test]
    fn otel_wins_over_jaeger_with_a_warning() {
        let s = on(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318"),
            ("JAEGER_DISABLED", "false"),
            ("JAEGER_ENDPOINT", "http://j:14268/api/traces"),
        ]);
        assert_eq!(s.endpoint, "http://otel:4318/v1/traces");
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
    }

    #[test]
    fn sdk_disabled_or_exporter_none_turn_it_off() {
        let ep = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318");
        assert_eq!(decide(&[ep, ("OTEL_SDK_DISABLED", "true")]), Ok(Decision::Off(None)));
        assert_eq!(decide(&[ep, ("OTEL_TRACES_EXPORTER", "none")]), Ok(Decision::Off(None)));
        let s = on(&[ep, ("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert!(s.warnings[0].contains("zipkin"), "{:?}", s.warnings);
    }

    #[test]
    fn bad_endpoints_are_errors_that_name_the_variable() {
        for (var, value) in [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "ftp://c/v1/traces"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
        ] {
            let err = decide(&[(var, value)]).unwrap_err();
            assert!(err.to_string().contains(var), "{err}");
            assert!(err.to_string().contains(value), "{err}");
        }
        let err = decide(&[("JAEGER_DISABLED", "false"), ("JAEGER_ENDPOINT", "jaeger:14268")]).unwrap_err();
        assert!(err.to_string().starts_with("JAEGER_ENDPOINT="), "{err}");
    }

    #[test]
    fn samplers_follow_the_otel_names_and_bad_values_fall_back() {
        let ep = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://otel:4318");
        let with = |name: &str, arg: Option<&str>| {
            let mut vars = vec![ep, ("OTEL_TRACES_SAMPLER", name)];
            vars.extend(arg.map(|a| ("OTEL_TRACES_SAMPLER_ARG", a)));
            on(&vars)
        };
        assert_eq!(with("always_off", None).sampling, Sampling::AlwaysOff);
        assert_eq!(with("always_on", None).sampling, Sampling::AlwaysOn);
        assert_eq!(with("traceidratio", Some("0.25")).sampling, Sampling::Ratio(0.25));
        assert_eq!(
            with("parentbased_traceidratio", None).sampling,
            Sampling::ParentBasedRatio(1.0)
        );
        assert_eq!(
            with("parentbased_always_off", None).sampling,
            Sampling::ParentBasedAlwaysOff
        );
        let s = with("traceidratio", Some("2"));
        assert_eq!(s.sampling, Sampling::Ratio(1.0));
        assert!(s.warnings[0].contains("OTEL_TRACES_SAMPLER_ARG"), "{:?}", s.warnings);
        let s = with("jaeger_remote", None);
        assert_eq!(s.sampling, Sampling::ParentBasedAlwaysOn);
        assert_eq!(s.warnings.len(), 1);
    }
}
