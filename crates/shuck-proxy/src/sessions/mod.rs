//! Sessions shared beyond one process: the remote session store and the sealing of what it holds.

pub(crate) mod sealing;
pub(crate) mod session_store;
