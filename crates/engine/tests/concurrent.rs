//! Many replies at once: a service with several lanes decodes replies side by side, their
//! passes taken together, and each reply is token for token the reply it gets alone, for every
//! drafter, greedy and seeded, whoever joins, finishes or is cancelled beside it. The service
//! reports that the passes really were shared.

mod common;

use common::{model, DRAFT, PROMPTS, TARGET};
use specula_engine::service::{EngineHandle, Prompt, ReplyEvent, Request, ServiceConfig, Ticket};
use specula_engine::{
    DrafterKind, GenerateOptions, Generation, Message, Mode, SamplingParams, Session, DEFAULT_DRAFT_VOCAB,
};

/// The real pair, the draft's output layer cut as the app loads it.
fn pair() -> Session {
    let device = common::device();
    let mut session = Session::load(model(TARGET), &device, 2048).unwrap();
    session.load_draft(model(DRAFT), &device).unwrap();
    session.set_draft_vocab(DEFAULT_DRAFT_VOCAB).unwrap();
    session
}

/// The replies of the test: a chat each, with a drafter, greedy or seeded.
fn requests() -> Vec<Request> {
    let drafters = [DrafterKind::Auto, DrafterKind::None, DrafterKind::Model, DrafterKind::Lookup];
    PROMPTS
        .iter()
        .take(5)
        .enumerate()
        .map(|(i, prompt)| {
            let sampling = match i % 2 {
                0 => SamplingParams::greedy(),
                _ => SamplingParams {
                    mode: Mode::Reproducible,
                    temperature: 0.8,
                    seed: 7 + i as u64,
                    ..Default::default()
                },
            };
            let options = GenerateOptions { max_tokens: 20 + 4 * i, sampling, ..Default::default() };
            let mut request = Request::new(Prompt::Chat(vec![Message::user(*prompt)]), options);
            request.drafter = Some(drafters[i % drafters.len()]);
            request
        })
        .collect()
}

fn ids(generation: &Generation) -> Vec<u32> {
    generation.tokens.iter().map(|t| t.id).collect()
}

#[test]
fn replies_decoded_together_are_each_the_reply_alone() {
    // One at a time, as before: the reference.
    let alone = EngineHandle::spawn(pair(), ServiceConfig::default());
    let expected: Vec<Vec<u32>> =
        requests().into_iter().map(|r| ids(&alone.submit(r).unwrap().wait().unwrap())).collect();
    assert!(alone.health().step.is_none(), "one lane takes no shared passes");
    drop(alone);

    // Four lanes for five replies: the fifth joins when the first leaves.
    let together = EngineHandle::spawn(pair(), ServiceConfig { parallel: 4, ..Default::default() });
    let tickets: Vec<Ticket> = requests().into_iter().map(|r| together.submit(r).unwrap()).collect();
    let got: Vec<Vec<u32>> = tickets.into_iter().map(|t| ids(&t.wait().unwrap())).collect();
    for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "reply {i} beside others differs from the reply alone");
    }
    let step = together.health().step.expect("lanes share a step");
    assert!(step.most_sequences >= 3, "passes were not shared: {step:?}");
    assert!(step.sequences > step.passes, "{step:?}");

    // A reply cancelled part-way leaves the others as they were alone; a chat taken up again
    // while others run resumes where its sequence was parked and still answers the same.
    let tickets: Vec<Ticket> = requests().into_iter().take(3).map(|r| together.submit(r).unwrap()).collect();
    let first = &tickets[0];
    while let Some(event) = first.recv() {
        if matches!(event, ReplyEvent::Tokens { .. }) {
            first.cancel();
            break;
        }
    }
    let mut ends = tickets.into_iter().map(|t| t.wait());
    assert!(ends.next().unwrap().is_ok_and(|g| g.tokens.len() < expected[0].len()), "the first was cancelled");
    for (i, end) in ends.enumerate() {
        assert_eq!(ids(&end.unwrap()), expected[i + 1], "reply {} beside a cancelled one", i + 1);
    }
    assert_eq!(together.health().running, 0);
}
