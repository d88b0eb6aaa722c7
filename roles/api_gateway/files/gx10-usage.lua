-- SPDX-License-Identifier: Apache-2.0
-- The gx10 gateway's usage filter (roles/api_gateway; HAProxy 2.5 or later, built with Lua):
-- reads each response's body as it passes to the client, unchanged and unbuffered, and keeps the
-- last token counts the API reported in it, which the access log prints as in= and out= for
-- `gx10 keys usage`.
--
-- Where the counts are: a whole JSON response's "usage" (chat and completions: prompt_tokens,
-- completion_tokens; Messages and Responses: input_tokens, output_tokens); in a stream, the
-- events that carry usage (Messages: message_start, then message_delta's running total;
-- Responses: response.completed; chat: the last chunk when the client asked for
-- stream_options.include_usage). The last value seen counts, so a running total ends right.
-- A count inside generated text cannot match: there its quotes are escaped (\"). The last few
-- bytes of each chunk are kept, so a count split across two chunks is read whole.

local KEEP = 96 -- bytes carried into the next chunk: longer than any "name": count pair

local PROMPT = { '"prompt_tokens"%s*:%s*(%d+)', '"input_tokens"%s*:%s*(%d+)' }
local COMPLETION = { '"completion_tokens"%s*:%s*(%d+)', '"output_tokens"%s*:%s*(%d+)' }

local Usage = {}
Usage.id = "gx10 usage"
Usage.flags = filter.FLT_CFG_FL_HTX
Usage.__index = Usage

function Usage:new()
  return setmetatable({ tail = "" }, Usage)
end

function Usage:start_analyze(txn, chn)
  if chn:is_resp() then
    filter.register_data_filter(self, chn)
  end
end

local function last(text, patterns)
  local found = nil
  for _, pattern in ipairs(patterns) do
    for value in text:gmatch(pattern) do
      found = value
    end
  end
  return found
end

function Usage:http_payload(txn, msg)
  local data = msg:body()
  if data == nil or #data == 0 then
    return
  end
  local text = self.tail .. data
  local prompt = last(text, PROMPT)
  if prompt ~= nil then
    txn:set_var("txn.gx10_in", tonumber(prompt))
  end
  local completion = last(text, COMPLETION)
  if completion ~= nil then
    txn:set_var("txn.gx10_out", tonumber(completion))
  end
  self.tail = text:sub(-KEEP)
end

core.register_filter("gx10_usage", Usage, function(flt, args)
  return flt
end)
