/**
 * @fibril/openai — Fibril's provider for OpenAI-compatible Chat Completions APIs (OpenAI,
 * DeepSeek, vLLM, Ollama, OpenRouter), built on the official `openai` SDK: the client
 * wrapper, the `LanguageModel`, the error mapping and the `Models` catalog.
 */
export * as OpenAiClient from "./OpenAiClient.ts"
export * as OpenAiError from "./OpenAiError.ts"
export * as OpenAiModel from "./OpenAiModel.ts"
export * as OpenAiModels from "./OpenAiModels.ts"
