//! The resources and the resource template of the core scenarios, and completion.

use rmcp::ErrorData;
use rmcp::model::{
    CompleteRequestParams, CompleteResult, ListResourceTemplatesResult, ListResourcesResult,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult,
};
use serde_json::{Value, json};

use crate::{PNG_1X1, from_json};

/// `resources/list`.
pub(crate) fn list() -> ListResourcesResult {
    from_json(json!({"resultType": "complete", "resources": [
        {"uri": "test://static-text", "name": "static-text",
         "description": "A static text resource", "mimeType": "text/plain"},
        {"uri": "test://static-binary", "name": "static-binary",
         "description": "A static PNG", "mimeType": "image/png"}
    ]}))
}

/// `resources/templates/list`.
pub(crate) fn templates() -> ListResourceTemplatesResult {
    from_json(json!({"resultType": "complete", "resourceTemplates": [
        {"uriTemplate": "test://template/{id}/data", "name": "template-data",
         "description": "Data for one id", "mimeType": "application/json"}
    ]}))
}

/// `resources/read`.
pub(crate) fn read(p: ReadResourceRequestParams) -> Result<ReadResourceResponse, ErrorData> {
    match contents(&p.uri) {
        Some(contents) => {
            let result: ReadResourceResult =
                from_json(json!({"resultType": "complete", "contents": [contents]}));
            Ok(result.into())
        }
        None => Err(ErrorData::resource_not_found(
            "Resource not found",
            Some(json!({"uri": p.uri})),
        )),
    }
}

fn contents(uri: &str) -> Option<Value> {
    match uri {
        "test://static-text" => Some(json!({"uri": uri, "mimeType": "text/plain",
            "text": "This is the content of the static text resource."})),
        "test://static-binary" => {
            Some(json!({"uri": uri, "mimeType": "image/png", "blob": PNG_1X1}))
        }
        _ => {
            let id = uri
                .strip_prefix("test://template/")?
                .strip_suffix("/data")?;
            (!id.is_empty() && !id.contains('/')).then(|| {
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                json!({"uri": uri, "mimeType": "application/json", "text": body.to_string()})
            })
        }
    }
}

/// `completion/complete`: the same few values for any argument, filtered by prefix.
pub(crate) fn complete(p: CompleteRequestParams) -> CompleteResult {
    let prefix = p.argument.value.to_lowercase();
    let values: Vec<&str> = ["paris", "park", "party", "test", "testing"]
        .into_iter()
        .filter(|v| v.starts_with(&prefix))
        .collect();
    from_json(json!({"resultType": "complete",
        "completion": {"values": values, "total": values.len(), "hasMore": false}}))
}
