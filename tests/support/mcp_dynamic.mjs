// A tiny MCP server (stdio) whose tool list changes: calling `add_tool`
// registers `second`, and the SDK sends notifications/tools/list_changed.
// Run from the server-everything install, whose node_modules has the SDK.
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
const server = new McpServer({ name: "dynamic", version: "1.0.0" }, { capabilities: { tools: { listChanged: true } } });
server.registerTool("add_tool", { description: "Adds the tool `second`" }, async () => {
  server.registerTool("second", { description: "Appears later" }, async () => ({ content: [{ type: "text", text: "second!" }] }));
  return { content: [{ type: "text", text: "added" }] };
});
await server.connect(new StdioServerTransport());
