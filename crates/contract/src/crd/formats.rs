//! Only `format` values the apiserver knows stay in the CRDs: schemars names Rust's integer
//! widths (`uint16`, `uint8`, …), which the apiserver does not know and answers every apply of
//! the CRD with `Warning: unrecognized format "uint16"`. Those become `int32`/`int64` with the
//! width's bounds as `minimum`/`maximum` (unless the field sets its own); any other unknown
//! format is dropped.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
    JSONSchemaPropsOrStringArray,
};

/// String formats the apiserver validates (apiextensions-apiserver's `supportedVersionedFormats`
/// as of 1.33), compared without `-` as it does.
const STRING_FORMATS: [&str; 24] = [
    "bsonobjectid",
    "uri",
    "email",
    "hostname",
    "ipv4",
    "ipv6",
    "cidr",
    "mac",
    "uuid",
    "uuid3",
    "uuid4",
    "uuid5",
    "isbn",
    "isbn10",
    "isbn13",
    "creditcard",
    "ssn",
    "hexcolor",
    "rgbcolor",
    "byte",
    "password",
    "date",
    "duration",
    "datetime",
];

/// The OpenAPI numeric formats, which the apiserver accepts on `integer` and `number`.
const NUMBER_FORMATS: [&str; 4] = ["int32", "int64", "float", "double"];

/// A format the apiserver knows, unchanged.
pub fn known(format: &str) -> bool {
    NUMBER_FORMATS.contains(&format) || STRING_FORMATS.contains(&format.replace('-', "").as_str())
}

/// A Rust integer width as the OpenAPI format that holds it, with the width's bounds.
fn integer_width(format: &str) -> Option<(&'static str, Option<f64>, Option<f64>)> {
    Some(match format {
        "int8" => ("int32", Some(f64::from(i8::MIN)), Some(f64::from(i8::MAX))),
        "uint8" => ("int32", Some(0.0), Some(f64::from(u8::MAX))),
        "int16" => ("int32", Some(f64::from(i16::MIN)), Some(f64::from(i16::MAX))),
        "uint16" => ("int32", Some(0.0), Some(f64::from(u16::MAX))),
        "uint32" => ("int64", Some(0.0), Some(f64::from(u32::MAX))),
        "uint64" | "uint" => ("int64", Some(0.0), None),
        "int" => ("int64", None, None),
        _ => return None,
    })
}

/// `crd` with every schema's unknown `format` mapped or dropped.
pub fn known_only(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        if let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut()) {
            fix(schema);
        }
    }
    crd
}

/// Fixes `schema` and every schema below it.
fn fix(schema: &mut JSONSchemaProps) {
    if let Some(format) = schema.format.take() {
        if known(&format) {
            schema.format = Some(format);
        } else if let Some((openapi, min, max)) = integer_width(&format) {
            schema.format = Some(openapi.to_string());
            schema.minimum = schema.minimum.or(min);
            schema.maximum = schema.maximum.or(max);
        }
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(s)) => fix(s),
        Some(JSONSchemaPropsOrArray::Schemas(list)) => list.iter_mut().for_each(fix),
        None => {}
    }
    for list in [&mut schema.all_of, &mut schema.any_of, &mut schema.one_of] {
        list.iter_mut().flatten().for_each(fix);
    }
    if let Some(not) = schema.not.as_mut() {
        fix(not);
    }
    for map in [
        &mut schema.properties,
        &mut schema.pattern_properties,
        &mut schema.definitions,
    ] {
        map.iter_mut().flat_map(|m| m.values_mut()).for_each(fix);
    }
    for or_bool in [&mut schema.additional_properties, &mut schema.additional_items] {
        if let Some(JSONSchemaPropsOrBool::Schema(s)) = or_bool.as_mut() {
            fix(s);
        }
    }
    for dependency in schema.dependencies.iter_mut().flat_map(|m| m.values_mut()) {
        if let JSONSchemaPropsOrStringArray::Schema(s) = dependency {
            fix(s);
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// Every `format` in a schema tree, with its minimum and maximum.
    fn formats(schema: &serde_json::Value, out: &mut Vec<(String, serde_json::Value, serde_json::Value)>) {
        match schema {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(f)) = map.get("format") {
                    out.push((
                        f.clone(),
                        map.get("minimum").cloned().unwrap_or_default(),
                        map.get("maximum").cloned().unwrap_or_default(),
                    ));
                }
                map.values().for_each(|v| formats(v, out));
            }
            serde_json::Value::Array(list) => list.iter().for_each(|v| formats(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_crd_has_only_formats_the_apiserver_knows() {
        for (file, crd) in crate::crd::all() {
            let mut found = Vec::new();
            formats(&serde_json::to_value(&crd.spec.versions).unwrap(), &mut found);
            for (format, _, _) in &found {
                assert!(known(format), "{file}: format {format}");
            }
        }
    }

    #[test]
    fn integer_widths_become_openapi_formats_with_their_bounds_and_others_are_dropped() {
        let schema: JSONSchemaProps = serde_json::from_value(serde_json::json!({
            "type": "object",
            "properties": {
                "polls": {"type": "integer", "format": "uint16", "minimum": 1.0, "maximum": 1000.0},
                "port": {"type": "integer", "format": "uint16"},
                "big": {"type": "integer", "format": "uint64"},
                "list": {"type": "array", "items": {"type": "integer", "format": "int8"}},
                "when": {"type": "string", "format": "date-time"},
                "odd": {"type": "string", "format": "semver"},
                "map": {"type": "object", "additionalProperties": {"type": "string", "format": "ipv4"}}
            }
        }))
        .unwrap();
        let mut fixed = schema;
        fix(&mut fixed);
        let mut found = Vec::new();
        formats(&serde_json::to_value(&fixed).unwrap(), &mut found);
        let mut found: Vec<_> = found
            .into_iter()
            .map(|(f, min, max)| format!("{f} {min} {max}"))
            .collect();
        found.sort();
        assert_eq!(
            found,
            [
                "date-time null null",
                "int32 -128.0 127.0",
                "int32 0.0 65535.0",
                "int32 1.0 1000.0",
                "int64 0.0 null",
                "ipv4 null null",
            ]
        );
    }
}
