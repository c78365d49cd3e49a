// pagedkv serve through the official OpenAI client for Node (the `openai` npm package).
// Run by tests/python/test_serve.py, which starts the server and sets PAGEDKV_BASE_URL and
// PAGEDKV_MODEL; run alone: PAGEDKV_BASE_URL=http://127.0.0.1:8000 node --test tests/node
import assert from 'node:assert/strict';
import { test } from 'node:test';
import OpenAI from 'openai';

const baseURL = process.env.PAGEDKV_BASE_URL;
const model = process.env.PAGEDKV_MODEL ?? 'stories260K';
if (!baseURL) throw new Error('set PAGEDKV_BASE_URL to a running pagedkv serve, e.g. http://127.0.0.1:8000');
const client = new OpenAI({ baseURL: `${baseURL}/v1`, apiKey: process.env.PAGEDKV_API_KEY ?? 'unused', maxRetries: 0 });

test('models list the served model', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [model]);
});

test('completion: greedy text, usage and finish reason', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.startsWith(', there was'), r.choices[0].text);
  assert.equal(r.usage.completion_tokens, 12);
  assert.equal(r.usage.prompt_tokens, 5);
  assert.equal(r.usage.total_tokens, 17);
});

test('streamed completion equals the whole one', async () => {
  const whole = await client.completions.create({ model, prompt: 'Tom and Lily', max_tokens: 30, temperature: 0.8, seed: 7 });
  const stream = await client.completions.create({
    model, prompt: 'Tom and Lily', max_tokens: 30, temperature: 0.8, seed: 7, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

test('chat completion, whole and streamed', async () => {
  const messages = [{ role: 'system', content: 'A story.' }, { role: 'user', content: 'Tell me about a cat' }];
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.ok(whole.choices[0].message.content.length > 0);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 20, temperature: 0, stream: true });
  let content = '';
  let role = null;
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      content += c.delta.content ?? '';
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, whole.choices[0].message.content);
});

test('n > 1 and stop strings', async () => {
  const r = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 16, n: 3, temperature: 1.0, seed: 3 });
  assert.deepEqual(r.choices.map((c) => c.index).sort(), [0, 1, 2]);
  const greedy = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0 });
  const cut = greedy.choices[0].text.indexOf('girl');
  assert.ok(cut > 0);
  const stopped = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 24, temperature: 0, stop: ['girl'] });
  assert.equal(stopped.choices[0].text, greedy.choices[0].text.slice(0, cut));
  assert.equal(stopped.choices[0].finish_reason, 'stop');
});

test('bad requests raise the client error classes', async () => {
  await assert.rejects(client.completions.create({ model: 'no-such-model', prompt: 'x', max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found');
  await assert.rejects(client.completions.create({ model, prompt: 'x', max_tokens: 100000 }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'context_length_exceeded');
});

test('structured output: response_format json_schema, whole and streamed; a refused schema', async () => {
  const schema = {
    type: 'object',
    properties: { color: { enum: ['red', 'green'] }, count: { type: 'integer', minimum: 0, maximum: 9 } },
    required: ['color', 'count'],
  };
  const response_format = { type: 'json_schema', json_schema: { name: 'toy', schema, strict: true } };
  const messages = [{ role: 'user', content: 'A toy, as JSON' }];
  const whole = await client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 1.0, seed: 4, response_format });
  assert.equal(whole.choices[0].finish_reason, 'stop');
  const value = JSON.parse(whole.choices[0].message.content);
  assert.deepEqual(Object.keys(value).sort(), ['color', 'count']);
  assert.ok(['red', 'green'].includes(value.color) && Number.isInteger(value.count) && value.count >= 0 && value.count <= 9);
  const stream = await client.chat.completions.create({ model, messages, max_tokens: 60, temperature: 1.0, seed: 4, response_format, stream: true });
  let content = '';
  for await (const chunk of stream) for (const c of chunk.choices) content += c.delta.content ?? '';
  assert.equal(content, whole.choices[0].message.content);
  await assert.rejects(
    client.chat.completions.create({ model, messages, max_tokens: 8,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', minProperties: 1 } } } }),
    (e) => e instanceof OpenAI.BadRequestError && e.code === 'invalid_grammar' && e.param === 'response_format' &&
      e.message.includes('minProperties'));
});
