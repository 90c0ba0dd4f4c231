//! Fuzzes the chat-template renderer: any template source with a fixed conversation must
//! compile and render to `Ok` or a named `Err` within the fuel budget, never panic, hang or
//! exhaust memory (the sandbox has no loader, so no file can be read).
#![no_main]

use kiln::chat_template::ChatTemplate;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else { return };
    let Ok(template) = ChatTemplate::new(source) else { return };
    let context = serde_json::json!({
        "messages": [
            {"role": "system", "content": "You are kiln."},
            {"role": "user", "content": "Hi <|im_start|> {{ 1 }}"},
            {"role": "assistant", "content": "Hello!"}
        ],
        "add_generation_prompt": true,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "tools": null
    });
    let _ = template.render(&context, None);
});
