//! What a `PostgresStore` does with task records: creating them under the caps
//! (`create.rs`) and the rest of the `TaskStore` contract (`tasks.rs`).

mod create;
mod tasks;
