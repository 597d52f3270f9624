//! Templates to objects: each template rendered with the plan's values, split into YAML
//! documents and typed.

use serde::Deserialize;
use serde_json::Value;

use super::images::Images;
use super::{Error, Inputs, Object, Resolved, handlebars, labels, values};

/// The typed objects of every template, in apply order. No CR label reaches an RBAC object: an
/// aggregation selector on any key (a vendor's, or OLM's `olm.opgroup.permissions/aggregate-to-*`)
/// would otherwise pull the operator's roles, Secret access included, into another role.
pub fn objects(inputs: &Inputs, resolved: &Resolved, images: &Images) -> Result<Vec<Object>, Error> {
    let cr_labels = inputs.cluster.metadata.labels.clone().unwrap_or_default();
    let mut objects: Vec<Object> = render(inputs, resolved, images)?
        .into_iter()
        .map(parse_document)
        .collect::<Result<_, _>>()?;
    for obj in &mut objects {
        if matches!(
            obj.kind(),
            "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding"
        ) && let Some(set) = obj.metadata_mut().labels.as_mut()
        {
            set.retain(|k, v| cr_labels.get(k) != Some(v) || labels::is_own_key(k));
        }
    }
    Ok(objects)
}

/// Renders every template into untyped documents, in apply order.
pub fn render(inputs: &Inputs, resolved: &Resolved, images: &Images) -> Result<Vec<Document>, Error> {
    let hb = handlebars::registry()?;
    let render = |name: &'static str, values: &Value| {
        hb.render(name, values).map_err(|source| Error::Template {
            template: name,
            source: Box::new(source),
        })
    };

    let mut values = values::values(inputs, resolved, images)?;
    if !resolved.disable_scheduler {
        let name = handlebars::SCHEDULER_CONFIG.0;
        let text = render(name, &values)?;
        documents(name, &text)?; // must be valid YAML before it is stored in the ConfigMap
        values["scheduler"]["config"] = Value::String(text);
    }

    let mut out = Vec::new();
    for (name, _) in handlebars::TEMPLATES {
        out.extend(documents(name, &render(name, &values)?)?);
    }
    Ok(out)
}

/// Types one rendered document.
pub fn parse_document(doc: Document) -> Result<Object, Error> {
    let field = |k: &str| doc.value.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let name = doc
        .value
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match Object::from_value(doc.value) {
        Some(Ok(object)) => Ok(object),
        Some(Err(source)) => Err(Error::Parse {
            template: doc.template,
            document: doc.index,
            what: format!("{kind} {name}"),
            source,
        }),
        None => Err(Error::UnknownKind {
            template: doc.template,
            document: doc.index,
            api_version,
            kind,
        }),
    }
}

/// One rendered YAML document before typing, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Document {
    /// Template name (file `templates/<name>.yaml.hbs`).
    pub template: &'static str,
    /// Index of the document within the template's output, from 0.
    pub index: usize,
    /// The document as parsed from YAML.
    pub value: Value,
}

/// Splits rendered text into its non-empty YAML documents.
fn documents(template: &'static str, text: &str) -> Result<Vec<Document>, Error> {
    let mut out = Vec::new();
    for (index, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = Value::deserialize(doc).map_err(|source| Error::Yaml {
            template,
            document: index,
            source,
        })?;
        if !value.is_null() {
            out.push(Document { template, index, value });
        }
    }
    Ok(out)
}
