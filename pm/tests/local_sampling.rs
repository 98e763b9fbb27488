//! Local sampling with intent (`Node::intent_now`): a key a node drew among those it holds
//! stays there while the draw's intent is active, even when another node signals intent for it;
//! without that intent the owner relocates it away before the sampler's push.

use ordo_pm::{Message, Node, PmMode};

/// Node 1 signals intent for key 0 (owned by node 0); what node 0 sends back.
fn owner_answer(sampled_with_intent: bool) -> (Node, Vec<Message>) {
    let init = |_| vec![0.0];
    let mut n0 = Node::new(0, 2, 2, 1, PmMode::AdaPm, init).unwrap();
    let mut n1 = Node::new(1, 2, 2, 1, PmMode::AdaPm, init).unwrap();
    let mut out = Vec::new();
    if sampled_with_intent {
        n0.intent_now(&[0], 1, &mut out).unwrap();
    }
    assert!(out.is_empty(), "node 0 owns key 0: no message");
    n1.intent(&[0], 0, 5).unwrap();
    let mut sent = Vec::new();
    n1.sync_round(&mut sent);
    let mut answer = Vec::new();
    for (to, m) in sent {
        assert_eq!(to, 0);
        n0.handle(1, m, &mut answer);
    }
    (n0, answer.into_iter().map(|(_, m)| m).collect())
}

#[test]
fn a_sampled_key_is_replicated_not_relocated_while_its_intent_is_active() {
    let (n0, answer) = owner_answer(true);
    assert!(n0.owns(0), "{answer:?}");
    assert!(matches!(answer[..], [Message::ReplicaCreate { key: 0, .. }]), "{answer:?}");
    // Without the sampler's intent the key leaves (the case the intent prevents).
    let (n0, answer) = owner_answer(false);
    assert!(!n0.owns(0));
    assert!(matches!(answer[..], [Message::Relocate { key: 0, .. }]), "{answer:?}");
}

#[test]
fn the_sampled_intent_expires_and_the_key_then_moves() {
    let (mut n0, _) = owner_answer(true);
    n0.advance_clock();
    let mut out = Vec::new();
    n0.sync_round(&mut out);
    // Node 1 is now the only holder: the owner relocates the key to it.
    assert!(!n0.owns(0), "{out:?}");
    assert!(out.iter().any(|(to, m)| *to == 1 && matches!(m, Message::Relocate { key: 0, .. })));
}
