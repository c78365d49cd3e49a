// The Vercel AI SDK's OpenAI-compatible provider against pagedkv serve: generateText and
// streamText, tools with toolChoice "required" or a named tool (plain and streamed), a tool run
// by the SDK with its result sent back, and generateObject / streamObject / Output.object with a
// zod schema (response_format json_schema: the provider is told the server supports structured
// outputs). Run by tests/python/test_serve_clients.py against a random-weight model with a Qwen
// template: only the forced calls and the grammar make its answers well formed.
// Run alone: PAGEDKV_BASE_URL=http://127.0.0.1:8000 PAGEDKV_MODEL=... node --test tests/node/ai_sdk.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateObject, generateText, Output, stepCountIs, streamObject, streamText, tool } from 'ai';
import { z } from 'zod';

const baseURL = process.env.PAGEDKV_BASE_URL;
const modelName = process.env.PAGEDKV_MODEL;
if (!baseURL || !modelName) throw new Error('set PAGEDKV_BASE_URL and PAGEDKV_MODEL to a running pagedkv serve with tool calls');

// includeUsage: streams ask for stream_options.include_usage.
const provider = createOpenAICompatible({
  name: 'pagedkv', baseURL: `${baseURL}/v1`, apiKey: 'unused', includeUsage: true, supportsStructuredOutputs: true,
});
const model = provider(modelName);
const common = { model, maxRetries: 0, maxOutputTokens: 200 };
// Fields beyond the SDK's own settings go through providerOptions.<name> into the request body.
const oneCall = { pagedkv: { parallel_tool_calls: false } };

// zod's .max() on a string counts UTF-16 code units, JSON Schema's maxLength code points: the
// strings are held to ASCII by a pattern so that both read the same bound.
const weather = z.object({
  city: z.string().regex(/^[A-Za-z][a-z ]{0,9}$/),
  days: z.number().int().min(1).max(7),
  unit: z.enum(['celsius', 'fahrenheit']),
});
const time = z.object({ zone: z.enum(['UTC', 'CET']) });
const tools = {
  get_weather: tool({ description: 'Weather forecast for a city', inputSchema: weather }),
  get_time: tool({ description: 'The current time', inputSchema: time }),
};
const schemas = { get_weather: weather, get_time: time };
const prompt = 'What is the weather in Oslo?';

function checkCalls(calls, { names = Object.keys(schemas), one = false } = {}) {
  assert.ok(calls.length >= 1);
  if (one) assert.equal(calls.length, 1);
  for (const call of calls) {
    assert.ok(names.includes(call.toolName), call.toolName);
    assert.match(call.toolCallId, /^call_[A-Za-z0-9]{24}$/);
    assert.ok(!call.invalid, JSON.stringify(call));  // the SDK marks calls whose input fails the schema
    schemas[call.toolName].parse(call.input);
  }
}

test('generateText and streamText give the same text and usage', async () => {
  const whole = await generateText({ ...common, prompt, maxOutputTokens: 24, temperature: 0 });
  assert.equal(whole.finishReason, 'length');
  assert.equal(whole.usage.outputTokens, 24);
  const parts = streamText({ ...common, prompt, maxOutputTokens: 24, temperature: 0 });
  let text = '';
  for await (const piece of parts.textStream) text += piece;
  assert.equal(text, whole.text);
  assert.equal(await parts.finishReason, 'length');
  const usage = await parts.usage;
  assert.deepEqual([usage.inputTokens, usage.outputTokens], [whole.usage.inputTokens, whole.usage.outputTokens]);
});

test('toolChoice "required", one call at a time: a call that fits its schema every time', async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await generateText({ ...common, prompt, tools, toolChoice: 'required', temperature: 1, seed, providerOptions: oneCall });
    checkCalls(r.toolCalls, { one: true });
    assert.equal(r.finishReason, 'tool-calls');
    assert.equal(r.text, '');
  }
});

test('toolChoice "required", streamed: the same calls as the whole answer', async () => {
  for (const seed of [5, 6]) {
    const body = { ...common, prompt, tools, toolChoice: 'required', temperature: 1, seed, providerOptions: oneCall };
    const whole = await generateText(body);
    const parts = streamText(body);
    const deltas = [];
    for await (const p of parts.fullStream) {
      if (p.type === 'tool-input-delta') deltas.push(p.delta);
      assert.notEqual(p.type, 'error', JSON.stringify(p));
    }
    const calls = await parts.toolCalls;
    checkCalls(calls, { one: true });
    assert.equal(deltas.join(''), JSON.stringify(calls[0].input));  // compact JSON, as generated
    const strip = (cs) => cs.map(({ toolName, input }) => ({ toolName, input }));  // ids are drawn per answer
    assert.deepEqual(strip(calls), strip(whole.toolCalls));
    assert.equal(await parts.finishReason, 'tool-calls');
  }
});

test('a named tool, parallel calls allowed (plain and streamed): every call is to that tool', async () => {
  const body = { ...common, prompt, tools, toolChoice: { type: 'tool', toolName: 'get_weather' }, temperature: 1 };
  for (const seed of [7, 8]) {
    // A random model may keep writing calls until max_tokens: the complete ones are returned.
    checkCalls((await generateText({ ...body, seed })).toolCalls, { names: ['get_weather'] });
    checkCalls(await streamText({ ...body, seed }).toolCalls, { names: ['get_weather'] });
  }
});

test('the SDK runs the tool and sends its result back', async () => {
  const seen = [];
  const run = {
    get_time: tool({
      description: 'The current time', inputSchema: time,
      execute: async (input) => { seen.push(input); return { time: '12:00' }; },
    }),
  };
  const r = await generateText({
    ...common, prompt: 'What time is it?', tools: run, toolChoice: 'required', temperature: 0,
    stopWhen: stepCountIs(2), providerOptions: oneCall,
  });
  assert.equal(r.steps.length, 2);
  assert.equal(seen.length, 2);  // "required" holds for the second step too
  for (const input of seen) time.parse(input);
  assert.deepEqual(r.steps[0].toolResults.map((t) => t.output), [{ time: '12:00' }]);
  // The second request carried the call and its result (assistant tool_calls, then role "tool").
  const sent = JSON.parse(r.steps[1].request.body);
  assert.deepEqual(sent.messages.map((m) => m.role), ['user', 'assistant', 'tool']);
  assert.equal(sent.messages[2].tool_call_id, r.steps[0].toolCalls[0].toolCallId);
});

const profile = z.object({
  name: z.string().regex(/^[A-Z][a-z]{1,7}$/),
  age: z.number().int().min(0).max(120),
  tags: z.array(z.enum(['red', 'green', 'blue'])).max(3),
  active: z.boolean(),
  nickname: z.string().regex(/^[a-z]{1,6}$/).nullable(),
});

test('generateObject and Output.object: a parsed object that satisfies the schema', async () => {
  for (const [temperature, seed] of [[0, 1], [1, 2], [1, 3]]) {
    const r = await generateObject({ ...common, schema: profile, prompt: 'Describe a person.', temperature, seed });
    assert.equal(r.finishReason, 'stop');
    profile.parse(r.object);
    assert.deepEqual(Object.keys(r.object), ['name', 'age', 'tags', 'active', 'nickname']);
  }
  const r = await generateText({ ...common, output: Output.object({ schema: profile }), prompt: 'Describe a person.', seed: 4 });
  profile.parse(r.output);
});

test('streamObject: partial objects, then the whole one', async () => {
  const r = streamObject({ ...common, schema: profile, prompt: 'Describe a person.', temperature: 1, seed: 5 });
  let partials = 0;
  for await (const partial of r.partialObjectStream) {
    assert.equal(typeof partial, 'object');
    partials += 1;
  }
  const object = await r.object;
  profile.parse(object);
  assert.ok(partials >= 2, `${partials} partial objects`);
});
