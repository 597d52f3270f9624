//! The handlebars registry: templates embedded at build time, strict mode, no HTML escaping, and
//! the `json` helper through which every value reaches a template.
//!
//! A value emitted as JSON is a single YAML flow scalar or collection: quotes, newlines, `{{`,
//! `---` and `: ` inside it stay data, so no user string can add keys or documents.

use handlebars::{
    Context, Handlebars, Helper, HelperDef, HelperResult, JsonTruthy, Output, RenderContext, RenderError,
    RenderErrorReason, Renderable,
};

use super::Error;

/// Every operand template, in the order the objects are applied (the Go operator's creation
/// order, namespace first).
pub const TEMPLATES: [(&str, &str); 20] = [
    ("namespace", include_str!("../../../../templates/namespace.yaml.hbs")),
    (
        "service-accounts",
        include_str!("../../../../templates/service-accounts.yaml.hbs"),
    ),
    ("node-rbac", include_str!("../../../../templates/node-rbac.yaml.hbs")),
    (
        "init-secret",
        include_str!("../../../../templates/init-secret.yaml.hbs"),
    ),
    (
        "etcd-tls-secret",
        include_str!("../../../../templates/etcd-tls-secret.yaml.hbs"),
    ),
    (
        "node-configmap",
        include_str!("../../../../templates/node-configmap.yaml.hbs"),
    ),
    (
        "node-daemonset",
        include_str!("../../../../templates/node-daemonset.yaml.hbs"),
    ),
    ("service", include_str!("../../../../templates/service.yaml.hbs")),
    ("ingress", include_str!("../../../../templates/ingress.yaml.hbs")),
    ("csi-driver", include_str!("../../../../templates/csi-driver.yaml.hbs")),
    (
        "csi-secrets",
        include_str!("../../../../templates/csi-secrets.yaml.hbs"),
    ),
    ("csi-rbac", include_str!("../../../../templates/csi-rbac.yaml.hbs")),
    ("csi-helper", include_str!("../../../../templates/csi-helper.yaml.hbs")),
    (
        "api-manager-rbac",
        include_str!("../../../../templates/api-manager-rbac.yaml.hbs"),
    ),
    (
        "api-manager-webhook",
        include_str!("../../../../templates/api-manager-webhook.yaml.hbs"),
    ),
    (
        "api-manager",
        include_str!("../../../../templates/api-manager.yaml.hbs"),
    ),
    ("scheduler", include_str!("../../../../templates/scheduler.yaml.hbs")),
    (
        "openshift-scc",
        include_str!("../../../../templates/openshift-scc.yaml.hbs"),
    ),
    ("pod-fencer", include_str!("../../../../templates/pod-fencer.yaml.hbs")),
    (
        "storageclass",
        include_str!("../../../../templates/storageclass.yaml.hbs"),
    ),
];

/// The kube-scheduler configuration file, rendered first and stored as a string in the scheduler
/// ConfigMap.
pub const SCHEDULER_CONFIG: (&str, &str) = (
    "scheduler-config",
    include_str!("../../../../templates/scheduler-config.yaml.hbs"),
);

/// `{{json value}}`: the value as compact JSON. A missing value is an error (strict mode does
/// not check helper parameters by itself).
fn json_helper(
    h: &Helper<'_>,
    _: &Handlebars<'_>,
    _: &Context,
    _: &mut RenderContext<'_, '_>,
    out: &mut dyn Output,
) -> HelperResult {
    let param = h.param(0).ok_or(RenderErrorReason::ParamNotFoundForIndex("json", 0))?;
    if param.is_value_missing() {
        return Err(RenderErrorReason::MissingVariable(param.relative_path().cloned()).into());
    }
    let text = serde_json::to_string(param.value()).map_err(|e| RenderErrorReason::NestedError(Box::new(e)))?;
    out.write(&text)?;
    Ok(())
}

/// `#if`/`#unless` that fail on a missing value instead of treating it as false, so a misspelt
/// toggle in a template is an error rather than a silently dropped object.
struct StrictIf {
    positive: bool,
}

impl HelperDef for StrictIf {
    fn call<'reg: 'rc, 'rc>(
        &self,
        h: &Helper<'rc>,
        r: &'reg Handlebars<'reg>,
        ctx: &'rc Context,
        rc: &mut RenderContext<'reg, 'rc>,
        out: &mut dyn Output,
    ) -> HelperResult {
        let name = if self.positive { "if" } else { "unless" };
        let param = h.param(0).ok_or(RenderErrorReason::ParamNotFoundForIndex(name, 0))?;
        if param.is_value_missing() {
            return Err(RenderError::from(RenderErrorReason::MissingVariable(
                param.relative_path().cloned(),
            )));
        }
        let truthy = param.value().is_truthy(false) == self.positive;
        match if truthy { h.template() } else { h.inverse() } {
            Some(t) => t.render(r, ctx, rc, out),
            None => Ok(()),
        }
    }
}

/// A registry with every template registered.
pub fn registry() -> Result<Handlebars<'static>, Error> {
    let mut hb = Handlebars::new();
    hb.set_strict_mode(true);
    hb.register_escape_fn(handlebars::no_escape);
    hb.register_helper("json", Box::new(json_helper));
    hb.register_helper("if", Box::new(StrictIf { positive: true }));
    hb.register_helper("unless", Box::new(StrictIf { positive: false }));
    for (name, source) in TEMPLATES.iter().chain(std::iter::once(&SCHEDULER_CONFIG)) {
        hb.register_template_string(name, source)
            .map_err(|source| Error::Template {
                template: name,
                source: Box::new(source.into()),
            })?;
    }
    Ok(hb)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_expression_goes_through_json_or_is_a_block() {
        // A bare `{{value}}` would paste the raw string into YAML; only `json` is allowed.
        let allowed = [
            "json ", "#if ", "/if", "#unless ", "/unless", "else", "!--", "#each ", "/each",
        ];
        for (name, source) in TEMPLATES.iter().chain(std::iter::once(&SCHEDULER_CONFIG)) {
            for (i, part) in source.split("{{").enumerate().skip(1) {
                let expr = part.trim_start_matches('~');
                assert!(
                    allowed.iter().any(|a| expr.starts_with(a)),
                    "template {name}: expression {i} `{{{{{}` does not use the json helper",
                    expr.split("}}").next().unwrap_or_default()
                );
            }
        }
    }

    #[test]
    fn missing_values_fail_in_json_and_if() {
        let mut hb = registry().unwrap();
        hb.register_template_string("t1", "{{json nope}}").unwrap();
        hb.register_template_string("t2", "{{#if nope}}x{{/if}}").unwrap();
        hb.register_template_string("t3", "{{#if yes}}a{{else}}b{{/if}}{{#unless yes}}c{{/unless}}")
            .unwrap();
        assert!(hb.render("t1", &json!({})).is_err());
        assert!(hb.render("t2", &json!({})).is_err());
        assert_eq!(hb.render("t3", &json!({"yes": null})).unwrap(), "bc");
    }

    #[test]
    fn json_helper_quotes_hostile_strings_on_one_line() {
        let mut hb = registry().unwrap();
        hb.register_template_string("t", "k: {{json v}}").unwrap();
        let out = hb.render("t", &json!({"v": "a\n---\nb: {{c}} \"q\" <&>"})).unwrap();
        assert_eq!(out, r#"k: "a\n---\nb: {{c}} \"q\" <&>""#);
    }
}
