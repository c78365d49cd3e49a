// Tool calling through the official OpenAI client for Node: plain and streamed calls, the
// client's stream helper assembling tool-call deltas, and its runTools loop (call, run the
// function, send the result back). Run by tests/python/test_serve_tools.py against a random-weight
// model with a Qwen template (tool_choice "required" or a named function forces the calls);
// run alone: PAGEDKV_BASE_URL=http://127.0.0.1:8000 PAGEDKV_MODEL=... node --test tests/node/openai_tools.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.PAGEDKV_BASE_URL;
const model = process.env.PAGEDKV_MODEL;
if (!baseURL || !model) throw new Error('set PAGEDKV_BASE_URL and PAGEDKV_MODEL to a running pagedkv serve with tool calls');
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: 'unused', maxRetries: 0 });

const weather = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 10 },
    unit: { enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city', parameters: weather } },
  { type: 'function', function: { name: 'get_time', description: 'The time', parameters: { type: 'object', properties: {} } } },
];
const messages = [{ role: 'user', content: 'Weather in Oslo?' }];
const named = { type: 'function', function: { name: 'get_weather' } };

function checkWeatherArguments(text) {
  const args = JSON.parse(text);
  assert.deepEqual(Object.keys(args), ['city', 'unit']);
  assert.equal(typeof args.city, 'string');
  assert.ok([...args.city].length <= 10, args.city);
  assert.ok(['celsius', 'fahrenheit'].includes(args.unit));
  return args;
}

test('required: one call with arguments as JSON text, finish_reason tool_calls', async () => {
  const r = await client.chat.completions.create({
    model, messages, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 150, seed: 1,
  });
  const choice = r.choices[0];
  assert.equal(choice.finish_reason, 'tool_calls');
  assert.equal(choice.message.content, null);
  assert.equal(choice.message.tool_calls.length, 1);
  const call = choice.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.ok(['get_weather', 'get_time'].includes(call.function.name));
  if (call.function.name === 'get_weather') checkWeatherArguments(call.function.arguments);
  else assert.deepEqual(JSON.parse(call.function.arguments), {});
});

test('the stream helper assembles the same call as the whole answer', async () => {
  const body = { model, messages, tools, tool_choice: named, parallel_tool_calls: false, max_tokens: 150, seed: 5 };
  const whole = await client.chat.completions.create(body);
  const stream = client.chat.completions.stream(body);
  const done = [];
  stream.on('tool_calls.function.arguments.done', (e) => done.push(e));
  const final = await stream.finalChatCompletion();
  const [a, b] = [whole.choices[0], final.choices[0]];
  assert.equal(b.finish_reason, 'tool_calls');
  assert.equal(b.message.tool_calls.length, 1);
  assert.equal(b.message.tool_calls[0].function.name, 'get_weather');
  assert.equal(b.message.tool_calls[0].function.arguments, a.message.tool_calls[0].function.arguments);
  checkWeatherArguments(b.message.tool_calls[0].function.arguments);
  assert.equal(done.length, 1);
  assert.equal(done[0].name, 'get_weather');
});

for (const stream of [false, true]) {
  test(`runTools${stream ? ' (streamed)' : ''}: the client runs the named function with the parsed arguments`, async () => {
    const seen = [];
    const runner = client.chat.completions.runTools({
      model, messages, tool_choice: named, max_tokens: 150, seed: 9, stream,
      tools: [{
        type: 'function',
        function: {
          name: 'get_weather', parameters: weather, parse: JSON.parse,
          function: (args) => { seen.push(args); return { temperature: 21 }; },
        },
      }],
    });
    await runner.done();
    assert.equal(seen.length, 1);
    checkWeatherArguments(JSON.stringify(seen[0]));
    const roles = runner.messages.map((m) => m.role);
    assert.deepEqual(roles.slice(-2), ['assistant', 'tool']);
  });
}

test('the call and its result go back through the template', async () => {
  const first = await client.chat.completions.create({
    model, messages, tools, tool_choice: named, parallel_tool_calls: false, max_tokens: 150, seed: 2,
  });
  const assistant = first.choices[0].message;
  const history = [...messages, assistant, { role: 'tool', tool_call_id: assistant.tool_calls[0].id, content: '21 C' }];
  const second = await client.chat.completions.create({ model, messages: history, tools, max_tokens: 8, seed: 2 });
  assert.ok(['stop', 'length', 'tool_calls'].includes(second.choices[0].finish_reason));
});
