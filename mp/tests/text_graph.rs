//! Graphs loaded from their text description (`ordo_mp::text`) compute what the builder API's
//! graphs compute, and bad descriptions fail with the line named.

mod common;

use std::sync::Arc;

use ordo_mp::models::mlp::mlp;
use ordo_mp::optimizer::Optimizer;
use ordo_mp::text::{TextError, parse};
use ordo_mp::{Graph, MpError, Payload, RunConfig, State, run};

const MLP: &str = "
# Appendix B.1's MLP, small: ReLUs and loss on the last worker (§3.1)
node ctrl Controller grad nograd @0
node l1 Linear 12 32 @0
node r1 Relu @1
node l2 Linear 32 32 @1
node r2 Relu @1
node l3 Linear 32 4 @0
node loss SoftmaxLoss @1
chain ctrl l1 r1 l2 r2 l3 loss
edge ctrl.1 loss.1
edge loss.0 ctrl.0
";

const RNN: &str = "
node ctrl Controller grad grad nograd @0
node ungroup Ungroup @0
node enter Isu enter @0
node phi Phi 2 @0
node concat Concat 2 @0
node split Cond mod 2 @0
node join Phi 2 @0
node relu Relu @0
node inc Isu increment @0
node cond Cond loop-end @0
node exit Isu exit @0
node out Linear 16 3 @0
node loss SoftmaxLoss @0
node cell0 Linear 22 16 @1   # one cell per replica, on its own worker
node cell1 Linear 22 16 @2
edge split.0 cell0.0
edge cell0.0 join.0
edge split.1 cell1.0
edge cell1.0 join.1
edge ctrl.0 ungroup.0
edge ctrl.1 enter.0
edge ctrl.2 loss.1
edge enter.0 phi.0
edge phi.0 concat.0
edge ungroup.0 concat.1
edge concat.0 split.0
chain join relu inc cond
edge cond.0 phi.1
edge cond.1 exit.0
chain exit out loss
edge loss.0 ctrl.0
replicas cell0 cell1
";

fn train(g: &mut Graph, data: Vec<(State, Vec<Payload>)>) {
    let order = (0..data.len()).collect();
    run(g, Arc::new(data), order, &RunConfig::default()).unwrap();
}

#[test]
fn text_mlp_trains_as_the_built_one() {
    let opt = Optimizer::sgd(0.1);
    let (mut text, _) = parse(MLP, &mut common::init(1), opt, 1, 2).unwrap();
    let (mut built, _) = mlp(&[12, 32, 32, 4], &mut common::init(1), opt, 1, 2).unwrap();
    assert_eq!(text.topology().place, built.topology().place);
    train(&mut text, common::dense_instances(20, 4, 12, 4, 7));
    train(&mut built, common::dense_instances(20, 4, 12, 4, 7));
    assert!(common::bits(&text.params()) == common::bits(&built.params()));
}

#[test]
fn text_rnn_with_replicas_trains_as_the_built_one() {
    let opt = Optimizer::adam(0.01);
    let (mut text, names) = parse(RNN, &mut common::init(4), opt, 2, 3).unwrap();
    let mut built = common::small_rnn(2, opt, 2);
    let linears = |g: &Graph| -> Vec<Vec<Payload>> {
        g.params().into_iter().filter(|p| !p.is_empty()).collect()
    };
    assert_eq!(text.topology().place[names["cell1"].0], 2);
    assert!(common::bits(&linears(&text)) == common::bits(&linears(&built)), "initial weights");
    train(&mut text, common::rnn_instances(30));
    train(&mut built, common::rnn_instances(30));
    assert!(common::bits(&linears(&text)) == common::bits(&linears(&built)), "after training");
}

fn error(text: &str) -> TextError {
    let mut init = common::init(1);
    match parse(text, &mut init, Optimizer::sgd(0.1), 1, 2) {
        Ok(_) => panic!("{text:?} parsed"),
        Err(e) => e,
    }
}

#[test]
fn bad_descriptions_name_their_line() {
    let line = |e: TextError| match e {
        TextError::Line { line, .. } | TextError::Graph { line, .. } => line,
        other => panic!("no line: {other}"),
    };
    assert_eq!(line(error("node c Controller grad\n\nnode x Lstm 3")), 3);
    assert_eq!(line(error("node c Controller grad\nchain c y")), 2);
    assert_eq!(line(error("node l Linear 4 four")), 1);
    assert_eq!(line(error("node c Controller maybe")), 1);
    assert_eq!(line(error("node r Relu\nnode r Relu")), 2);
    assert_eq!(line(error("node a Relu\nnode b Relu\nedge a.0 b.0\nedge a.0 b.0")), 4);
    assert!(matches!(
        error("node a Relu\nnode b Relu\nedge a.3 b.0"),
        TextError::Graph { line: 3, source: MpError::NoSuchPort { .. } }
    ));
    assert!(matches!(
        error("node c Controller grad\nnode r Relu"),
        TextError::Build(MpError::Unconnected { .. })
    ));
    assert!(matches!(
        error("node r Relu @7\nnode c Controller grad\nchain c r\nedge r.0 c.0"),
        TextError::Build(MpError::Placement { worker: 7, .. })
    ));
}
