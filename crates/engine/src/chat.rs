//! Chat templates: the Jinja template a GGUF file carries, rendered with minijinja the way HF
//! transformers renders it (trim_blocks, lstrip_blocks, Python string methods,
//! `raise_exception`), and ChatML for models that carry none.

use crate::error::{Error, Result};
use crate::gguf::GgufFile;
use serde::{Deserialize, Serialize};

/// ChatML, as llama.cpp and transformers fall back to.
const FALLBACK_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Self {
        Self { role: Role::System, content: content.into() }
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self { role: Role::User, content: content.into() }
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self { role: Role::Assistant, content: content.into() }
    }
}

pub struct ChatTemplate {
    env: minijinja::Environment<'static>,
    bos: String,
    eos: String,
    /// False when the model carried no template and ChatML stands in.
    pub from_model: bool,
}

impl ChatTemplate {
    pub fn from_gguf(gguf: &GgufFile, bos: Option<&str>, eos: Option<&str>) -> Result<Self> {
        match gguf.string("tokenizer.chat_template") {
            Ok(source) => Self::new(source, bos, eos, true),
            Err(_) => Self::new(FALLBACK_TEMPLATE.to_string(), bos, eos, false),
        }
    }

    pub fn new(source: String, bos: Option<&str>, eos: Option<&str>, from_model: bool) -> Result<Self> {
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        env.add_template_owned("chat", source).map_err(|e| Error::Template(e.to_string()))?;
        Ok(Self { env, bos: bos.unwrap_or_default().to_string(), eos: eos.unwrap_or_default().to_string(), from_model })
    }

    /// The prompt for `messages`, ending where the assistant's reply begins.
    pub fn render(&self, messages: &[Message]) -> Result<String> {
        let template = self.env.get_template("chat").map_err(|e| Error::Template(e.to_string()))?;
        template
            .render(minijinja::context! {
                messages => messages,
                add_generation_prompt => true,
                bos_token => self.bos,
                eos_token => self.eos,
            })
            .map_err(|e| Error::Template(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_is_chatml() {
        let t = ChatTemplate::new(FALLBACK_TEMPLATE.into(), None, None, false).unwrap();
        let p = t.render(&[Message::system("S"), Message::user("Hi")]).unwrap();
        assert_eq!(p, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    }

    #[test]
    fn python_methods_and_exceptions_work() {
        let src = "{% if messages[0].content.strip().startswith('x') %}{{ raise_exception('bad') }}{% endif %}{{ messages[0]['content'].upper() }}";
        let t = ChatTemplate::new(src.into(), None, None, true).unwrap();
        assert_eq!(t.render(&[Message::user(" hi ")]).unwrap(), " HI ");
        let err = t.render(&[Message::user("xy")]).unwrap_err();
        assert!(err.to_string().contains("bad"), "{err}");
    }
}
