//! The prompts of the core scenarios, one of them asking for input first (MRTR).

use rmcp::ErrorData;
use rmcp::model::{GetPromptRequestParams, GetPromptResponse, GetPromptResult, ListPromptsResult};
use serde_json::{Value, json};

use crate::mrtr::{accepted, elicit, input_required};
use crate::{PNG_1X1, from_json};

pub(crate) fn list() -> ListPromptsResult {
    from_json(json!({"resultType": "complete", "prompts": [
        {"name": "test_simple_prompt", "description": "A simple prompt"},
        {"name": "test_prompt_with_arguments", "description": "A prompt with arguments", "arguments": [
            {"name": "arg1", "description": "First test argument", "required": true},
            {"name": "arg2", "description": "Second test argument", "required": true}]},
        {"name": "test_prompt_with_embedded_resource", "description": "A prompt with a resource", "arguments": [
            {"name": "resourceUri", "description": "URI of the resource to embed", "required": true}]},
        {"name": "test_prompt_with_image", "description": "A prompt with an image"},
        {"name": "test_input_required_result_prompt", "description": "A prompt that asks for context first"}
    ]}))
}

/// `prompts/get`.
pub(crate) fn get(p: GetPromptRequestParams) -> Result<GetPromptResponse, ErrorData> {
    let arg = |k: &str| {
        p.arguments
            .as_ref()
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let user = |content: Value| json!({"role": "user", "content": content});
    let messages = match p.name.as_str() {
        "test_simple_prompt" => vec![user(
            json!({"type": "text", "text": "This is a simple prompt for testing."}),
        )],
        "test_prompt_with_arguments" => {
            let (a, b) = (
                arg("arg1").unwrap_or_default(),
                arg("arg2").unwrap_or_default(),
            );
            vec![user(
                json!({"type": "text", "text": format!("Prompt with arguments: arg1='{a}', arg2='{b}'")}),
            )]
        }
        "test_prompt_with_embedded_resource" => {
            let uri = arg("resourceUri")
                .ok_or_else(|| ErrorData::invalid_params("resourceUri is required", None))?;
            vec![
                user(
                    json!({"type": "resource", "resource": {"uri": uri, "mimeType": "text/plain",
                    "text": "Embedded resource content for testing."}}),
                ),
                user(
                    json!({"type": "text", "text": "Please process the embedded resource above."}),
                ),
            ]
        }
        "test_prompt_with_image" => vec![
            user(json!({"type": "image", "data": PNG_1X1, "mimeType": "image/png"})),
            user(json!({"type": "text", "text": "Please analyze the image above."})),
        ],
        "test_input_required_result_prompt" => {
            let context = accepted(p.input_responses.as_ref(), "user_context")
                .and_then(|c| c.get("context")?.as_str());
            match context {
                Some(context) => vec![user(
                    json!({"type": "text", "text": format!("Use this context: {context}")}),
                )],
                None => {
                    return Ok(input_required(
                        json!({"user_context": elicit("What context should the prompt use?", "context", "string")}),
                        None,
                    )
                    .into());
                }
            }
        }
        other => {
            return Err(ErrorData::invalid_params(
                format!("unknown prompt {other}"),
                None,
            ));
        }
    };
    // `resultType` must be written out: rmcp adds it only through its constructors.
    let result: GetPromptResult =
        from_json(json!({"resultType": "complete", "messages": messages}));
    Ok(result.into())
}
