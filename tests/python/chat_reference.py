"""Renders chat conversations as the published templates do, for
tests/unit/chat_template_test.cpp: Llama 3 Instruct's and Qwen's ChatML
Jinja templates (as in their tokenizer_config.json), tokenized by Hugging
Face's `tokenizers` from a tokenizer.json, and each token's loss flag from
the characters it covers: 1 when it lies in an assistant message's content
or that message's end-of-turn token.

usage: chat_reference.py TOKENIZER_JSON CONVERSATIONS_JSONL llama3|chatml
prints one JSON line per conversation: {"ids": [...], "loss": [0/1, ...]}
(Titan ends every conversation with the tokenizer's EOS; so does this.)
"""
import json
import sys

import jinja2
from tokenizers import Tokenizer

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
)
CHATML = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
)


def main(tokenizer_path, conversations_path, template):
    tokenizer = Tokenizer.from_file(tokenizer_path)
    bos, eos = "<|begin_of_text|>", "<|end_of_text|>"
    source, end_turn = (LLAMA3, "<|eot_id|>") if template == "llama3" else (CHATML, "<|im_end|>")
    render = jinja2.Environment().from_string(source)
    with open(conversations_path) as lines:
        for line in lines:
            messages = json.loads(line)["messages"]
            text = render.render(messages=messages, bos_token=bos) + eos
            # The characters of every assistant reply and its end of turn.
            spans, cursor = [], 0
            for message in messages:
                if message["role"] != "assistant":
                    continue
                content = message["content"].strip() if template == "llama3" else message["content"]
                start = text.index(content + end_turn, cursor)
                cursor = start + len(content + end_turn)
                spans.append((start, cursor))
            encoding = tokenizer.encode(text, add_special_tokens=False)
            loss = [int(any(s <= begin and end <= e for s, e in spans) and end > begin)
                    for begin, end in encoding.offsets]
            print(json.dumps({"ids": encoding.ids, "loss": loss}))


if __name__ == "__main__":
    main(*sys.argv[1:])
