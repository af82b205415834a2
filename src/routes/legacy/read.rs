//! What the 2025-11-25 `tasks/*` routes and the answers share: reading the
//! `taskId` param, and the error a failed store call answers.

use crate::error::StoreError;
use crate::task::TaskId;
use crate::wire::{Envelope, RpcError};

/// The `taskId` param: `Ok(None)` when it is not one this layer could have made.
pub(super) fn task_id(envelope: &Envelope<'_>) -> Result<Option<TaskId>, RpcError> {
    let Some(text) = envelope.param_str("taskId") else {
        return Err(RpcError::invalid_params("Missing taskId"));
    };
    Ok(text.parse().ok())
}

/// -32603 for a failed store call, logged with its cause.
pub(super) fn store_failed(e: StoreError) -> RpcError {
    tracing::error!(error = %crate::error::Chain(&e), "task store failed");
    RpcError::internal_error()
}
