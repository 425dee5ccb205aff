/**
 * @fibril/testkit — test doubles for Fibril: the ScriptedModel (a `LanguageModel` driven by a
 * script) and the script format it plays.
 */
export * as ScriptedModel from "./ScriptedModel.ts"
export * as Script from "./Script.ts"
