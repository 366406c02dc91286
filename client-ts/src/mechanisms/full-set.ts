/**
 * Every other mechanism of the Chorus registry: `import "@chorus-ldp/client/mechanisms/full"`
 * registers them (the Node entry does; in the browser, chorus-full.min.js has them). Strings
 * (RAPPOR, sketches, discovery), numbers beyond one bit, vectors, distributions and records.
 */
import "./common-set.js";
import { categoriesOf, NumericRange } from "./common.js";
import { PEM, TreeHist } from "./discovery.js";
import { HierarchicalHistogram, SquareWave } from "./distributions.js";
import { DBitFlip, HadamardResponse, SubsetSelection, SuccinctHistogram } from "./frequency.js";
import { registerMechanisms } from "./index.js";
import { Hybrid, Laplace, Piecewise } from "./numbers.js";
import { CategoryRappor, Rappor } from "./rappor.js";
import { Marginals, RandomSamplingFakeData, SampledAttribute, SplitBudget } from "./records.js";
import { CountMeanSketch, HadamardCountMeanSketch, OpenRR } from "./strings.js";
import { DuchiMultidim, SampledAttributes } from "./vectors.js";

registerMechanisms({
  ss: (d, e, p) => new SubsetSelection(categoriesOf(d), e, p),
  hr: (d, e) => new HadamardResponse(categoriesOf(d), e),
  shist: (d, e) => new SuccinctHistogram(categoriesOf(d), e),
  dbitflip: (d, e, p) => new DBitFlip(categoriesOf(d), e, p),
  rappor: (d, _e, p) => new Rappor("rappor", d, p),
  basic_rappor: (d, _e, p) => new CategoryRappor("basic_rappor", d, p),
  boolean_rappor: (d, _e, p) => new CategoryRappor("boolean_rappor", d, p),
  o_rr: (d, e, p) => new OpenRR(d, e, p),
  o_rappor: (d, _e, p) => new Rappor("o_rappor", d, p),
  cms: (d, e, p) => new CountMeanSketch(d, e, p),
  hcms: (d, e, p) => new HadamardCountMeanSketch(d, e, p),
  pm: (d, e, p) => new Piecewise(NumericRange.of(d), e, p),
  hm: (d, e, p) => new Hybrid(NumericRange.of(d), e, p),
  laplace: (d, e, p) => new Laplace(NumericRange.of(d), e, p),
  duchi_md: (d, e) => new DuchiMultidim(d, e),
  harmony: (d, e, p) => new SampledAttributes("harmony", d, e, p),
  pm_md: (d, e, p) => new SampledAttributes("pm_md", d, e, p),
  hm_md: (d, e, p) => new SampledAttributes("hm_md", d, e, p),
  sw: (d, e, p) => new SquareWave(d, e, p),
  hh: (d, e, p) => new HierarchicalHistogram(d, e, p),
  smp: (d, e) => new SampledAttribute(d, e),
  spl: (d, e) => new SplitBudget(d, e),
  rsfd: (d, e) => new RandomSamplingFakeData(d, e),
  marginals: (d, e, p) => new Marginals(d, e, p),
  pem: (d, e, p) => new PEM(d, e, p),
  treehist: (d, e, p) => new TreeHist(d, e, p),
});
