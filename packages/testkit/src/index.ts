/**
 * @fibril/testkit — test doubles for Fibril: the ScriptedModel (a `LanguageModel` driven by a
 * script), the script format it plays, and a fake OpenAI-compatible HTTP server answering
 * from the same scripts.
 */
export * as FakeOpenAiServer from "./FakeOpenAiServer.ts"
export * as FakeRateLimit from "./FakeRateLimit.ts"
export * as Invariants from "./Invariants.ts"
export * as Lab from "./Lab.ts"
export * as LabBugs from "./LabBugs.ts"
export * as LabGenerators from "./LabGenerators.ts"
export * as LabReport from "./LabReport.ts"
export * as OtlpReceiver from "./OtlpReceiver.ts"
export * as Script from "./Script.ts"
export * as ScriptedModel from "./ScriptedModel.ts"
export * as Simulation from "./Simulation.ts"
