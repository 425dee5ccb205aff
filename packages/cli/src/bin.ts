#!/usr/bin/env node
// The `fibril` executable. Node >= 22.19 runs this TypeScript file directly.
import { NodeRuntime } from "@effect/platform-node"
import * as Cli from "./Cli.ts"

NodeRuntime.runMain(Cli.run(process.argv.slice(2)))
