#!/usr/bin/env node
// The `fibril` executable: the build in dist/ (`npm run build`; `npm install` and `npm pack`
// make it). A file of its own so that npm can link it before the build exists.
import "../dist/bin.js"
