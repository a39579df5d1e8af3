// The data directory's three folders: what each holds, the names the API accepts in it, and the
// config field that names its files (backend/files/service.py has the rules; the API checks them).

import { h } from '../dom.js';

export const FOLDERS = [
  {
    folder: 'datasets',
    kind: 'dataset',
    title: 'Datasets',
    accept: '.jsonl,.csv,.parquet',
    suffixes: ['.jsonl', '.csv', '.parquet'],
    what: () => ['Your own training and held-out data: JSONL, CSV or Parquet files, one row per sample, ',
      'with the columns data.files maps (text and label for a classifier, source and target for seq2seq, ',
      'text for a causal LM).'],
    field: () => [h('code', {}, 'data.files.train'), ' and ', h('code', {}, 'data.files.eval'),
      ' (with ', h('code', {}, 'data.dataset: files'), ')'],
  },
  {
    folder: 'traces',
    kind: 'trace',
    title: 'Traces',
    accept: '.csv,.json',
    suffixes: ['.csv', '.json'],
    what: () => ['Measured per-round device speed and availability: CSV or JSON with the columns round, ',
      'cluster, device, speed_factor and available.'],
    field: () => [h('code', {}, 'network.trace_file')],
  },
  {
    folder: 'checkpoints',
    kind: 'checkpoint',
    title: 'Checkpoints',
    accept: '.json,.safetensors,.txt,.model',
    suffixes: [],
    what: () => ['Pretrained Hugging Face models: a folder of the files save_pretrained writes ',
      '(config.json, model.safetensors, and the tokenizer\'s files), uploaded together under one folder name. ',
      'A folder is listed once it has its config.json.'],
    field: () => [h('code', {}, 'model.pretrained_path'), ' (with ', h('code', {}, 'model.source: transformers'),
      '; ', h('code', {}, 'data.tokenizer.kind: pretrained'), ' uses its tokenizer)'],
  },
];

export const FOLDER_BY_NAME = Object.fromEntries(FOLDERS.map((f) => [f.folder, f]));
