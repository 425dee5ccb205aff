/**
 * The results a cluster tool step gives a call it did not run to its end: one stopped by a
 * cancel, and a non-idempotent one it will not run again after a crash (AgentWorkflow).
 */
import type * as AgentSteps from "@fibril/core/AgentSteps"

/** The result of a tool call stopped because its agent was cancelled while it ran. */
export const cancelledCall = (call: AgentSteps.StepToolCall): AgentSteps.ToolStep => ({
  id: call.id,
  name: call.name,
  isFailure: true,
  result: {
    error: "Cancelled",
    message: `the agent was cancelled while this ${call.name} call ran: it was interrupted`
  }
})

/**
 * The result a non-idempotent tool call gets when its step runs again and finds the call was
 * started before (`ClusterStore.startToolCall`): the tool is not run a second time.
 */
export const interruptedCall = (call: AgentSteps.StepToolCall): AgentSteps.ToolStep => ({
  id: call.id,
  name: call.name,
  isFailure: true,
  result: {
    error: "Interrupted",
    message:
      `this ${call.name} call was started, then interrupted before its result was saved (the worker running it stopped or crashed). It was not run again because ${call.name} is not idempotent: it may have run in part or in full. Check its effects (read the files it writes, look for what it creates) before calling it again.`
  }
})
