//! The LMD study (Zhang, Language Model Decomposition): sampling, extraction, moments,
//! analysis and tables over local model folders.
