#!/usr/bin/env node
/**
 * The `st-convert` executable's entry in the bundle (scripts/bundle.mjs): turns on the code cache
 * for the bundle's chunks, then loads the command, all of which is in those chunks.
 */
import { fileURLToPath } from "node:url";
import { enableCodeCache } from "./codeCache.js";

enableCodeCache(fileURLToPath(new URL("./chunks", import.meta.url)));
void import("./cli.js").then(({ run }) => run());
