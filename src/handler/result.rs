//! What a tool handler may return. Handlers return what they have (a `String`, a typed value
//! wrapped in [`Json`], a whole `CallToolResult`, an [`InputRequired`] question, or a `Result` of
//! any of these whose error converts into [`ToolError`]) and the registry turns it into a result.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use super::{InputRequired, Outcome, ToolError, ToolResult};
use crate::protocol::types::CallToolResult;

/// A value a tool handler may return.
pub trait IntoToolResult {
    /// The result, or the error to report.
    fn into_tool_result(self) -> ToolResult;

    /// The `outputSchema` this return type promises, if any: advertised with the tool, and
    /// every `structuredContent` it produces conforms to it.
    fn output_schema() -> Option<Value> {
        None
    }
}

/// Structured output: serialised into `structuredContent` (and mirrored as JSON text, as the spec
/// recommends), with the JSON Schema of what the type serialises to advertised as the tool's
/// `outputSchema` (a member skipped when empty is not required), and every result checked
/// against it, a task's too.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Json<T>(pub T);

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> ToolResult {
        Ok(Outcome::Complete(self))
    }
}

impl IntoToolResult for Outcome<CallToolResult> {
    fn into_tool_result(self) -> ToolResult {
        Ok(self)
    }
}

impl IntoToolResult for InputRequired {
    fn into_tool_result(self) -> ToolResult {
        Ok(Outcome::InputRequired(self))
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> ToolResult {
        Ok(Outcome::Complete(CallToolResult::text(self)))
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> ToolResult {
        Ok(Outcome::Complete(CallToolResult::text(self)))
    }
}

impl<T: Serialize + JsonSchema> IntoToolResult for Json<T> {
    fn into_tool_result(self) -> ToolResult {
        match serde_json::to_value(self.0) {
            Ok(value) => Ok(Outcome::Complete(CallToolResult::structured(value))),
            Err(error) => Err(ToolError::Execution(format!("the result could not be serialised: {error}"))),
        }
    }

    fn output_schema() -> Option<Value> {
        // The schema of what `T` serialises to (a member skipped when empty is not required),
        // not of what it would read.
        let settings = schemars::generate::SchemaSettings::draft2020_12().for_serialize();
        let mut schema = schemars::SchemaGenerator::new(settings).into_root_schema_for::<T>().to_value();
        let map = schema.as_object_mut()?;
        // The type's name and doc comment are for Rust readers, not the model.
        map.remove("$schema");
        map.remove("title");
        map.remove("description");
        // The spec requires an object at the root; any other type is served without a schema.
        // A tagged enum's schema is a choice of objects, with no type of its own at the root.
        let object = |schema: &Value| schema.get("type") == Some(&Value::String("object".into()));
        let choices = ["oneOf", "anyOf"].iter().find_map(|k| map.get(*k)?.as_array());
        let choice_of_objects = choices.is_some_and(|branches| !branches.is_empty() && branches.iter().all(object));
        if choice_of_objects && !map.contains_key("type") {
            map.insert("type".into(), Value::String("object".into()));
        }
        object(&schema).then_some(schema)
    }
}

impl<T: IntoToolResult, E: Into<ToolError>> IntoToolResult for Result<T, E> {
    fn into_tool_result(self) -> ToolResult {
        self.map_err(Into::into).and_then(IntoToolResult::into_tool_result)
    }

    fn output_schema() -> Option<Value> {
        T::output_schema()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn complete(result: ToolResult) -> CallToolResult {
        match result {
            Ok(Outcome::Complete(result)) => result,
            other => panic!("not a complete result: {other:?}"),
        }
    }

    #[derive(Serialize, JsonSchema)]
    struct Weather {
        /// Degrees Celsius.
        celsius: f64,
    }

    #[test]
    fn each_return_type_becomes_its_result() {
        assert_eq!(complete("hi".into_tool_result()), CallToolResult::text("hi"));
        assert_eq!(complete(String::from("hi").into_tool_result()), CallToolResult::text("hi"));
        let weather = complete(Json(Weather { celsius: 21.5 }).into_tool_result());
        assert_eq!(weather.structured_content, Some(json!({"celsius": 21.5})));
        assert_eq!(weather.content, CallToolResult::text(r#"{"celsius":21.5}"#).content, "mirrored as text");
        let failed: Result<String, &str> = Err("no such city");
        match failed.into_tool_result() {
            Err(ToolError::Execution(message)) => assert_eq!(message, "no such city"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(InputRequired::new().into_tool_result(), Ok(Outcome::InputRequired(_))));
    }

    /// The schema describes what the output serialises to: a member left out when empty is
    /// not required, so such output passes its own schema.
    #[test]
    fn the_output_schema_is_that_of_the_serialised_output() {
        #[derive(Serialize, JsonSchema)]
        struct Found {
            name: String,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            tags: Vec<String>,
        }
        let schema = Json::<Found>::output_schema().expect("an object schema");
        assert_eq!(schema["required"], json!(["name"]));
        let output = complete(Json(Found { name: "n".into(), tags: Vec::new() }).into_tool_result());
        let structured = output.structured_content.expect("structured");
        assert_eq!(crate::server::schema::validate(&schema, &structured), Ok(()));
    }

    #[test]
    fn only_object_outputs_advertise_a_schema() {
        let schema = <Result<Json<Weather>, ToolError>>::output_schema().expect("an object schema");
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["properties"]["celsius"]["description"], "Degrees Celsius.");
        assert!(schema.get("title").is_none() && schema.get("$schema").is_none());
        assert_eq!(<Json<Vec<u32>>>::output_schema(), None, "an array is not an object");
        assert_eq!(String::output_schema(), None);
        // What is not an object is sent as text alone: `structuredContent` is an object or absent.
        for (value, text) in [
            (complete(Json(vec![1, 2]).into_tool_result()), "[1,2]"),
            (complete(Json(None::<Weather>).into_tool_result()), "null"),
        ] {
            assert_eq!((value.joined_text().as_str(), value.structured_content), (text, None));
        }
    }

    /// A tagged enum always serialises to an object: its schema, a choice of objects, is one.
    #[test]
    fn a_tagged_enum_advertises_its_schema() {
        #[derive(Serialize, JsonSchema)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        enum Found {
            City { name: String },
            Nothing {},
        }
        let schema = Json::<Found>::output_schema().expect("an object schema");
        assert_eq!(schema["type"], "object");
        for output in [Found::City { name: "Oslo".into() }, Found::Nothing {}] {
            let structured = complete(Json(output).into_tool_result()).structured_content.expect("an object");
            assert_eq!(crate::server::schema::validate(&schema, &structured), Ok(()));
        }
        assert!(crate::server::schema::validate(&schema, &json!({"kind": "planet"})).is_err());
    }
}
