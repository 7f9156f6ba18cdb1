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

mod step {
    //! The step itself, on a tiny synthetic model: threads feeding their own sequences through
    //! one step get the bits each gets alone, a long prompt is read in slices beside a decoding
    //! sequence, and a sequence past its room fails alone.

    use candle_core::Device;
    use specula_engine::gguf::GgufFile;
    use specula_engine::models::decoder::Decoder;
    use specula_engine::models::PREFILL_CHUNK;
    use specula_engine::models::{load_decoder, Passes};
    use specula_engine::step::Step;
    use specula_engine::{synth, KvFormat};
    use std::sync::{Arc, Barrier};

    fn decoder() -> Arc<Decoder> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.gguf");
        synth::write(&synth::Spec::preset("tiny-q4k", 3).unwrap(), &synth::tiny_tokenizer(), &path).unwrap();
        let mut gguf = GgufFile::open(&path).unwrap();
        Arc::new(load_decoder(&mut gguf, &Device::Cpu, 512, KvFormat::F16).unwrap().0)
    }

    /// The calls one sequence makes: a prompt (last logits only), then one token at a time.
    fn calls(seed: u32, prompt: usize, decode: usize) -> Vec<(Vec<u32>, bool)> {
        let token = |i: usize| (i as u32 * 31 + seed * 7) % 250;
        let mut calls = vec![((0..prompt).map(token).collect(), false)];
        calls.extend((prompt..prompt + decode).map(|i| (vec![token(i)], true)));
        calls
    }

    fn bits(t: &candle_core::Tensor) -> Vec<u32> {
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().map(|v| v.to_bits()).collect()
    }

    /// Run `calls` on a fresh sequence, through `passes` or alone; each call's logits' bits,
    /// or its error's code.
    fn run(decoder: &Arc<Decoder>, calls: &[(Vec<u32>, bool)], passes: Option<&Step>) -> Vec<Result<Vec<u32>, String>> {
        let mut sequence = decoder.new_sequence().unwrap();
        calls
            .iter()
            .map(|(tokens, all)| {
                let out = match passes {
                    Some(step) => step.forward(decoder, &mut sequence, tokens, *all),
                    None => decoder.forward(&mut sequence, tokens, *all),
                };
                out.map(|t| bits(&t)).map_err(|e| e.code().to_string())
            })
            .collect()
    }

    #[test]
    fn sequences_in_one_step_get_their_bits_alone_and_a_prompt_is_read_in_slices() {
        let decoder = decoder();
        // A decodes from the start; B reads a long prompt beside it; C runs past its room.
        let work = [calls(1, 3, 40), calls(2, 300, 4), calls(3, 60, 480)];
        let alone: Vec<_> = work.iter().map(|c| run(&decoder, c, None)).collect();
        assert!(alone[2].iter().any(Result::is_err), "C must overflow its 512 positions");
        let step = Step::new();
        let start = Arc::new(Barrier::new(work.len()));
        let together: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .iter()
                .map(|c| {
                    let (decoder, step, start) = (decoder.clone(), step.clone(), start.clone());
                    scope.spawn(move || {
                        let _member = step.join();
                        start.wait();
                        run(&decoder, c, Some(&step))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (i, (together, alone)) in together.iter().zip(&alone).enumerate() {
            assert_eq!(together, alone, "sequence {i} in the step differs from its passes alone");
        }
        let counts = step.counts();
        assert!(counts.most_sequences >= 2 && counts.sequences > counts.passes, "{counts:?}");
        // B's prompt, fed in one call, was read in slices beside the others (at most a prefill
        // chunk's worth on a model this fast), never whole.
        assert!(counts.most_rows <= PREFILL_CHUNK + 60 + 3, "{counts:?}");
    }
}

#[test]
fn a_load_of_what_is_loaded_is_answered_while_another_reply_runs_and_the_next_reply_runs_beside_it() {
    // The app loads the settings' models before every reply: a second chat's load must not
    // wait for the first chat's reply, nor stop the engine.
    let engine = EngineHandle::spawn_empty(ServiceConfig { parallel: 2, ..Default::default() });
    let spec = specula_engine::service::LoadSpec {
        target: model(TARGET),
        draft: None,
        draft_vocab: None,
        context: 1024,
        kv_format: specula_engine::KvFormat::F16,
        device: "cpu".into(),
        prompt_cache: None,
    };
    engine.load(spec.clone()).recv().unwrap().unwrap();
    // Both lanes busy (lane 0, which loads go to, among them).
    let long = GenerateOptions { max_tokens: 120, sampling: SamplingParams::greedy(), ..Default::default() };
    let replies: Vec<Ticket> = [PROMPTS[7], PROMPTS[5]]
        .iter()
        .map(|p| engine.submit(Request::new(Prompt::Chat(vec![Message::user(*p)]), long.clone())).unwrap())
        .collect();
    for reply in &replies {
        while !matches!(reply.recv(), Some(ReplyEvent::Tokens { .. })) {}
    }
    let answer = engine.load(spec).recv_timeout(std::time::Duration::from_secs(5));
    assert!(answer.is_ok_and(|health| health.is_ok()), "the load of what is loaded waited for the running replies");
    let short = GenerateOptions { max_tokens: 8, sampling: SamplingParams::greedy(), ..Default::default() };
    let next = engine.submit(Request::new(Prompt::Chat(vec![Message::user(PROMPTS[6])]), short)).unwrap();
    for reply in replies {
        assert!(reply.wait().is_ok());
    }
    assert_eq!(next.wait().unwrap().tokens.len(), 8);
}
