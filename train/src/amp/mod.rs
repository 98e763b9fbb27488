//! AMPNet (paper 004) on the paper's tasks: the 4-layer MLP of Appendix B.1 on Fashion-MNIST
//! (the paper used MNIST) and the vanilla RNN on the list-reduction task of Appendix B.2, run by
//! `ordo-mp`'s asynchronous model-parallel runtime.

pub mod cli;
pub mod list_reduction;
pub mod lr_schedule;
pub mod tasks;
pub mod train;
