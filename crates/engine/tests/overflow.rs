//! A chat that outgrows the context, on a real model: `stop` ends the reply as "context full",
//! truncate-middle and rolling drop whole turns and go on, and the part of the reply decoded
//! before the context filled is the same tokens as under `stop` (the same prompt, greedy).

mod common;

use common::*;
use specula_engine::protocol::{FinishReason, Overflow, Trim};
use specula_engine::{
    Decoding, DrafterKind, Flow, GenerateOptions, Generation, KSetting, Message, Mode, ReplyTo, SamplingParams,
    Session, TokenEvent, TokenSink,
};

const CONTEXT: usize = 256;

#[derive(Default)]
struct Heard {
    trims: Vec<Trim>,
    tokens: usize,
    trimmed_after_tokens: bool,
}

impl TokenSink for Heard {
    fn on_trim(&mut self, trim: &Trim) -> Flow {
        self.trimmed_after_tokens |= self.tokens > 0;
        self.trims.push(*trim);
        Flow::Continue
    }
    fn on_token(&mut self, _: &TokenEvent) -> Flow {
        self.tokens += 1;
        Flow::Continue
    }
}

fn chat() -> Vec<Message> {
    vec![
        Message::system("You are a helpful assistant."),
        Message::user("What is the capital of France?"),
        Message::assistant("The capital of France is Paris, a city on the Seine known for its museums and cafes."),
        Message::user("And of Italy?"),
        Message::assistant("The capital of Italy is Rome, home of the Colosseum and the Vatican City."),
        Message::user("Write a long story, at least 1,000 words, about a lighthouse keeper and a storm."),
    ]
}

fn reply(session: &mut Session, overflow: Overflow, drafter: DrafterKind) -> (Generation, Heard) {
    let messages = chat();
    let render = Default::default();
    let to = ReplyTo::Chat { messages: &messages, tools: &[], render: &render };
    let sampling = SamplingParams { mode: Mode::Greedy, temperature: 0.0, ..Default::default() };
    let options = GenerateOptions { max_tokens: 260, sampling, ..Default::default() };
    let decoding = Decoding { drafter, k: KSetting::Fixed(4) };
    let mut heard = Heard::default();
    let g = session.reply(to, overflow, &options, decoding, &mut heard).unwrap();
    (g, heard)
}

fn ids(g: &Generation) -> Vec<u32> {
    g.tokens.iter().map(|t| t.id).collect()
}

#[test]
fn a_reply_that_fills_the_context_stops_or_goes_on_by_the_policy() {
    // The Qwen 0.5B (SmolLM 135M answers the question before the last instead).
    let mut session = Session::load(model(DRAFT), &device(), CONTEXT).unwrap();
    let prompt = session.chat_prompt(&chat(), &[]).unwrap().len();
    assert!(prompt < CONTEXT - CONTEXT / 4, "the prompt fits as it is: {prompt}");

    let (stopped, heard) = reply(&mut session, Overflow::Stop, DrafterKind::None);
    assert_eq!(stopped.finish_reason, FinishReason::ContextFull, "{prompt} prompt tokens: {}", stopped.text);
    assert_eq!(prompt + stopped.tokens.len(), CONTEXT, "it ran to the last position");
    assert!(heard.trims.is_empty() && stopped.stats.trimmed.is_none());

    for (overflow, drafter) in [(Overflow::TruncateMiddle, DrafterKind::None), (Overflow::Rolling, DrafterKind::Lookup)]
    {
        let (went_on, heard) = reply(&mut session, overflow, drafter);
        let what = format!("{overflow:?} with {drafter:?}");
        assert_ne!(went_on.finish_reason, FinishReason::ContextFull, "{what}: {}", went_on.text);
        assert!(went_on.tokens.len() > stopped.tokens.len(), "{what}: it went on past the full context");
        assert_eq!(went_on.stats.generated_tokens, went_on.tokens.len(), "{what}: the parts' figures add up");
        assert_eq!(
            ids(&went_on)[..stopped.tokens.len()],
            ids(&stopped)[..],
            "{what}: the same reply until the context filled"
        );
        assert!(heard.trimmed_after_tokens, "{what}: the trim was said when the reply went on");
        let first = heard.trims[0];
        let expected_first = if overflow == Overflow::Rolling { 0 } else { 2 };
        assert_eq!(first.first, expected_first, "{what}: {first:?}");
        assert!(first.messages >= 2 && first.messages % 2 == 0, "{what}: whole turns left: {first:?}");
        assert_eq!(went_on.stats.trimmed, heard.trims.last().copied(), "{what}: the reply keeps the last trim");
    }
}

#[test]
fn a_prompt_too_long_is_refused_under_stop_and_fitted_under_truncate_middle() {
    let mut session = Session::load(model(SMOLLM), &device(), CONTEXT).unwrap();
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(60);
    let messages =
        vec![Message::system("Be brief."), Message::user(long), Message::assistant("Noted."), Message::user("Say hi.")];
    let render = Default::default();
    let to = ReplyTo::Chat { messages: &messages, tools: &[], render: &render };
    let sampling = SamplingParams { mode: Mode::Greedy, temperature: 0.0, ..Default::default() };
    let options = GenerateOptions { max_tokens: 8, sampling, ..Default::default() };
    let decoding = Decoding { drafter: DrafterKind::None, k: KSetting::Fixed(1) };
    let err = session.reply(to, Overflow::Stop, &options, decoding, &mut Heard::default()).unwrap_err();
    assert_eq!(err.code(), "context_overflow", "{err}");
    // The first exchange stays under truncate-middle: its long question is cut in the middle.
    let mut heard = Heard::default();
    let g = session.reply(to, Overflow::TruncateMiddle, &options, decoding, &mut heard).unwrap();
    assert_eq!(g.stats.generated_tokens, g.tokens.len());
    let trim = g.stats.trimmed.expect("trimmed");
    assert_eq!(trim.messages, 0, "nothing droppable between the first exchange and the question");
    assert!(trim.tokens > 300, "{trim:?}");
    assert!(g.stats.prompt_tokens <= CONTEXT - 8, "{}", g.stats.prompt_tokens);
    // Rolling drops the first exchange whole instead, and cuts nothing.
    let g = session.reply(to, Overflow::Rolling, &options, decoding, &mut Heard::default()).unwrap();
    assert_eq!(g.stats.trimmed, Some(Trim { first: 0, messages: 2, tokens: 0 }));
}

#[test]
fn a_message_longer_than_the_context_by_itself_is_refused_before_the_prompt_is_tokenized() {
    // The harm (issue 65, item 2): a 7.5 MiB message was rendered and tokenized whole (about
    // 190 bytes of memory a byte) before it was refused. Counted in pieces, it is refused
    // at once; under truncate-middle it is still fitted.
    let mut session = Session::load(model(SMOLLM), &device(), CONTEXT).unwrap();
    let long = "The quick brown fox jumps over the lazy dog.\n".repeat(4 << 20 >> 5);
    assert!(long.len() > 4 << 20);
    let messages = vec![Message::user(long)];
    let render = Default::default();
    let to = ReplyTo::Chat { messages: &messages, tools: &[], render: &render };
    let options = GenerateOptions { max_tokens: 4, sampling: SamplingParams::greedy(), ..Default::default() };
    let decoding = Decoding { drafter: DrafterKind::None, k: KSetting::Fixed(1) };
    let started = std::time::Instant::now();
    let err = session.reply(to, Overflow::Stop, &options, decoding, &mut Heard::default()).unwrap_err();
    assert_eq!(err.code(), "context_overflow", "{err}");
    assert!(err.to_string().contains("maximum context length is 256 tokens"), "{err}");
    eprintln!("refused in {:?}", started.elapsed());
}
