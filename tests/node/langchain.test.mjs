// LangChain's ChatOpenAI against pagedkv serve: plain and streamed text, tools bound with
// tool_choice "required" or a named tool (plain and streamed, parallel calls or one), the calls
// and their results sent back through the template, and withStructuredOutput with a zod schema
// (response_format json_schema). Run by tests/python/test_serve_clients.py against a random-weight
// model with a Qwen template: only the forced calls and the grammar make its answers well formed.
// Run alone: PAGEDKV_BASE_URL=http://127.0.0.1:8000 PAGEDKV_MODEL=... node --test tests/node/langchain.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ChatOpenAI } from '@langchain/openai';
import { AIMessage, HumanMessage, ToolMessage } from '@langchain/core/messages';
import { z } from 'zod';

const baseURL = process.env.PAGEDKV_BASE_URL;
const model = process.env.PAGEDKV_MODEL;
if (!baseURL || !model) throw new Error('set PAGEDKV_BASE_URL and PAGEDKV_MODEL to a running pagedkv serve with tool calls');

function chat(fields = {}) {
  return new ChatOpenAI({
    model, apiKey: 'unused', configuration: { baseURL: `${baseURL}/v1` }, maxRetries: 0, maxTokens: 200, ...fields,
  });
}

// zod's .max() on a string counts UTF-16 code units, JSON Schema's maxLength code points: the
// strings are held to ASCII by a pattern so that both read the same bound.
const weather = z.object({
  city: z.string().regex(/^[A-Za-z][a-z ]{0,9}$/),
  days: z.number().int().min(1).max(7),
  unit: z.enum(['celsius', 'fahrenheit']),
});
const time = z.object({ zone: z.enum(['UTC', 'CET']) });
const tools = [
  { name: 'get_weather', description: 'Weather forecast for a city', schema: weather },
  { name: 'get_time', description: 'The current time', schema: time },
];
const schemas = { get_weather: weather, get_time: time };
const question = 'What is the weather in Oslo?';

function checkCalls(message, { names = Object.keys(schemas), one = false } = {}) {
  assert.deepEqual(message.invalid_tool_calls ?? [], []);
  assert.ok(message.tool_calls.length >= 1, JSON.stringify(message.content));
  if (one) assert.equal(message.tool_calls.length, 1);
  for (const call of message.tool_calls) {
    assert.ok(names.includes(call.name), call.name);
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    schemas[call.name].parse(call.args);  // throws when the arguments break the schema
  }
}

async function streamed(runnable, input, options) {
  let message;
  for await (const chunk of await runnable.stream(input, options)) message = message ? message.concat(chunk) : chunk;
  return message;
}

test('invoke and stream give the same text, and the stream reports usage', async () => {
  const llm = chat({ maxTokens: 24, temperature: 0 });
  const whole = await llm.invoke(question);
  assert.equal(typeof whole.content, 'string');
  assert.equal(whole.response_metadata.finish_reason, 'length');
  assert.equal(whole.usage_metadata.output_tokens, 24);
  const parts = await streamed(llm, question);
  assert.equal(parts.content, whole.content);
  // ChatOpenAI streams with stream_options.include_usage: the last chunk carries the counts.
  const counts = (u) => [u.input_tokens, u.output_tokens, u.total_tokens];
  assert.deepEqual(counts(parts.usage_metadata), counts(whole.usage_metadata));
});

for (const stream of [false, true]) {
  const how = stream ? 'streamed' : 'plain';
  test(`tool_choice "required", one call at a time (${how}): a call that fits its schema every time`, async () => {
    const llm = chat({ temperature: 1 }).bindTools(tools, { tool_choice: 'required', parallel_tool_calls: false });
    for (const seed of [1, 2, 3, 4]) {
      const message = stream ? await streamed(llm, question, { seed }) : await llm.invoke(question, { seed });
      checkCalls(message, { one: true });
      assert.equal(message.content, '');
      if (!stream) assert.equal(message.response_metadata.finish_reason, 'tool_calls');
    }
  });

  test(`a named tool, strict, parallel calls allowed (${how}): every call is to that tool`, async () => {
    const llm = chat({ temperature: 1 }).bindTools(tools, { tool_choice: 'get_weather', strict: true });
    for (const seed of [5, 6, 7]) {
      const message = stream ? await streamed(llm, question, { seed }) : await llm.invoke(question, { seed });
      // A random model may keep writing calls until max_tokens: the complete ones are returned.
      checkCalls(message, { names: ['get_weather'] });
    }
  });
}

test('streamed and whole calls agree (greedy)', async () => {
  const llm = chat({ temperature: 0 }).bindTools(tools, { tool_choice: 'get_time', parallel_tool_calls: false });
  const whole = await llm.invoke(question);
  const parts = await streamed(llm, question);
  checkCalls(whole, { names: ['get_time'], one: true });
  const calls = (m) => m.tool_calls.map(({ name, args }) => ({ name, args }));  // ids are drawn per answer
  assert.deepEqual(calls(parts), calls(whole));
});

test('a call and its result go back through the template', async () => {
  const llm = chat({ temperature: 0 }).bindTools(tools, { tool_choice: 'required', parallel_tool_calls: false });
  const first = await llm.invoke([new HumanMessage(question)]);
  checkCalls(first, { one: true });
  const call = first.tool_calls[0];
  const history = [new HumanMessage(question), first, new ToolMessage({ tool_call_id: call.id, content: 'sunny, 21 C' })];
  const second = await llm.invoke(history);
  checkCalls(second, { one: true });
  // Content as blocks (sent as text parts, the tool's result too) and an assistant message
  // written by hand, text beside its call.
  const byHand = new AIMessage({ content: 'Checking.', tool_calls: [{ id: 'call_1', name: 'get_time', args: { zone: 'UTC' } }] });
  const third = await chat({ maxTokens: 4 }).invoke([
    new HumanMessage({ content: [{ type: 'text', text: 'What time ' }, { type: 'text', text: 'is it?' }] }), byHand,
    new ToolMessage({ tool_call_id: 'call_1', content: [{ type: 'text', text: '12:00' }] })]);
  assert.equal(typeof third.content, 'string');
});

const profile = z.object({
  name: z.string().regex(/^[A-Z][a-z]{1,7}$/),
  age: z.number().int().min(0).max(120),
  tags: z.array(z.enum(['red', 'green', 'blue'])).max(3),
  active: z.boolean(),
  nickname: z.string().regex(/^[a-z]{1,6}$/).nullable(),
  // zod writes a string format as "format" and a "pattern" spelling it out.
  born: z.iso.date(),
  id: z.uuid(),
});
// Bounds on non-integer numbers (z.number().min(0.5)) are not generated: the server refuses them
// with a 400 naming 'minimum', so the schemas bound integers only.

test('withStructuredOutput (json_schema): a parsed object that satisfies the schema', async () => {
  for (const [temperature, seed] of [[0, 1], [1, 2], [1, 3]]) {
    const llm = chat({ temperature }).withStructuredOutput(profile, { method: 'jsonSchema', name: 'profile' });
    const value = await llm.invoke('Describe a person.', { seed });
    profile.parse(value);
    assert.deepEqual(Object.keys(value), ['name', 'age', 'tags', 'active', 'nickname', 'born', 'id']);
  }
  // includeRaw: the raw message beside the parsed object.
  const raw = await chat({ temperature: 0 }).withStructuredOutput(profile, { method: 'jsonSchema', includeRaw: true })
    .invoke('Describe a person.');
  assert.deepEqual(JSON.parse(raw.raw.content), raw.parsed);
});
